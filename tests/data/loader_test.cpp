// The training loader: coverage of an epoch, shuffling, rank slices, document ids and positions,
// exact resume, prefetch, mixtures, stages, one-pass validation and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "data_test_util.h"
#include "lmt/base/xxh64.h"
#include "lmt/data/loader.h"
#include "lmt/data/shard.h"

namespace lmt::data {
namespace {

using testing::Docs;

constexpr int32_t kEos = 0;
constexpr int64_t kVocab = 1 << 20;  // unique ids need room (uint32 shards)

class LoaderTest : public testing::ScratchDirTest {
 protected:
  // A dataset whose non-EOS tokens are all distinct, so each row can be traced to its stream offset.
  void make_unique(const std::string& name, int docs, int min_len, int max_len, uint64_t seed, int32_t first_id = 1,
                   int64_t shard_tokens = 997) {
    docs_[name] = testing::unique_token_docs(docs, min_len, max_len, seed, first_id);
    testing::write_dataset(path(name), docs_[name], kVocab, kEos, shard_tokens);
    stream_[name] = testing::stream_of(docs_[name], kEos);
    for (size_t i = 0; i < stream_[name].size(); ++i)
      if (stream_[name][i] != kEos) offset_of_[stream_[name][i]] = static_cast<int64_t>(i);
  }

  LoaderOptions options(const std::string& name, int64_t B, int64_t T) {
    LoaderOptions o;
    o.stages = {DataStage{0, {DataSource{path(name), 1.0}}}};
    o.batch = B;
    o.seq = T;
    o.seed = 1234;
    return o;
  }

  std::unique_ptr<Loader> open(const LoaderOptions& o) {
    auto l = Loader::open(o);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? std::move(l).value() : nullptr;
  }

  static std::vector<Batch> take(Loader& l, int n) {
    std::vector<Batch> out(static_cast<size_t>(n));
    for (Batch& b : out) {
      Status s = l.next(&b);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return out;
  }

  // Stream offset of row r of `b` (checked against the stream: tokens and targets shifted by one).
  int64_t row_start(const std::string& name, const Batch& b, int64_t r) {
    const int32_t* tok = b.tokens.data() + r * b.T;
    int64_t start = -1;
    for (int64_t t = 0; t < b.T && start < 0; ++t)
      if (tok[t] != kEos) start = offset_of_.at(tok[t]) - t;
    EXPECT_GE(start, 0);
    const std::vector<int32_t>& s = stream_.at(name);
    for (int64_t t = 0; t < b.T; ++t) {
      EXPECT_EQ(tok[t], s[static_cast<size_t>(start + t)]);
      EXPECT_EQ(b.targets[static_cast<size_t>(r * b.T + t)], s[static_cast<size_t>(start + t + 1)]);
    }
    return start;
  }

  std::map<std::string, Docs> docs_;
  std::map<std::string, std::vector<int32_t>> stream_;
  std::unordered_map<int32_t, int64_t> offset_of_;
};

bool same(const Batch& a, const Batch& b) {
  return a.B == b.B && a.T == b.T && a.tokens == b.tokens && a.targets == b.targets && a.doc_ids == b.doc_ids &&
         a.positions == b.positions;
}

TEST_F(LoaderTest, NoTokenIsLostOrDuplicatedOverAnEpoch) {
  make_unique("d", 60, 1, 40, 1);
  const int64_t T = 16, B = 4;
  const int64_t windows = (static_cast<int64_t>(stream_["d"].size()) - 1) / T;
  for (bool shuffle : {true, false}) {
    LoaderOptions o = options("d", B, T);
    o.shuffle = shuffle;
    auto l = open(o);
    const int64_t used = shuffle ? windows / B * B : windows;  // a shuffled epoch has ⌊W/G⌋·G positions
    std::multiset<int64_t> starts;
    for (int64_t i = 0; i < used; i += B) {
      const int64_t rows = std::min(B, used - i);
      Batch b;
      ASSERT_TRUE(l->next(&b).ok());
      for (int64_t r = 0; r < rows; ++r) starts.insert(row_start("d", b, r));
    }
    std::set<int64_t> unique(starts.begin(), starts.end());
    EXPECT_EQ(unique.size(), starts.size()) << "a window was read twice in one epoch (shuffle=" << shuffle << ")";
    EXPECT_EQ(static_cast<int64_t>(starts.size()), used);
    for (int64_t s : starts) EXPECT_EQ(s % T, 0);
    EXPECT_LE(*starts.rbegin(), (windows - 1) * T);
    if (!shuffle) {  // stream order: windows 0, 1, 2, ...
      int64_t expect = 0;
      for (int64_t s : starts) EXPECT_EQ(s, expect++ * T);
    }
  }
}

TEST_F(LoaderTest, ShuffledEpochsDifferAndEachCoversWindowsOnce) {
  make_unique("d", 50, 5, 30, 2);
  const int64_t T = 8, B = 3;
  auto l = open(options("d", B, T));
  const int64_t windows = (static_cast<int64_t>(stream_["d"].size()) - 1) / T;
  const int64_t per_epoch = windows / B;  // batches (world 1, G = B)
  std::vector<std::vector<int64_t>> epochs(3);
  for (auto& e : epochs) {
    for (int64_t i = 0; i < per_epoch; ++i) {
      Batch b;
      ASSERT_TRUE(l->next(&b).ok());
      for (int64_t r = 0; r < B; ++r) e.push_back(row_start("d", b, r));
    }
    std::set<int64_t> u(e.begin(), e.end());
    EXPECT_EQ(u.size(), e.size());
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST_F(LoaderTest, DocumentIdsChangeExactlyAtEosAndPositionsRestart) {
  make_unique("d", 200, 0, 12, 3);
  auto l = open(options("d", 4, 32));
  for (const Batch& b : take(*l, 50)) {
    for (int64_t r = 0; r < b.B; ++r) {
      const int32_t* tok = b.tokens.data() + r * b.T;
      const int32_t* doc = b.doc_ids.data() + r * b.T;
      const int32_t* pos = b.positions.data() + r * b.T;
      EXPECT_EQ(doc[0], 0);
      EXPECT_EQ(pos[0], 0);
      for (int64_t t = 1; t < b.T; ++t) {
        const bool after_eos = tok[t - 1] == kEos;
        EXPECT_EQ(doc[t], doc[t - 1] + (after_eos ? 1 : 0)) << "row " << r << " t " << t;
        EXPECT_EQ(pos[t], after_eos ? 0 : pos[t - 1] + 1);
        EXPECT_LT(pos[t], b.T);
      }
    }
  }
}

TEST_F(LoaderTest, RanksSeeDisjointWindowsThatTogetherCoverTheEpoch) {
  make_unique("d", 80, 1, 30, 4);
  const int64_t T = 10, B = 2;
  const int world = 3;
  const int64_t windows = (static_cast<int64_t>(stream_["d"].size()) - 1) / T;
  const int64_t per_epoch = windows / (B * world);  // batches per rank per epoch
  std::set<int64_t> seen;
  for (int rank = 0; rank < world; ++rank) {
    LoaderOptions o = options("d", B, T);
    o.rank = rank;
    o.world = world;
    auto l = open(o);
    for (const Batch& b : take(*l, static_cast<int>(per_epoch)))
      for (int64_t r = 0; r < B; ++r) EXPECT_TRUE(seen.insert(row_start("d", b, r)).second) << "rank " << rank;
    EXPECT_EQ(l->tokens_seen(), per_epoch * B * T * world);  // global count, the same on every rank
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), per_epoch * B * world);
}

TEST_F(LoaderTest, ALongDocumentNeverFillsABatch) {
  // One document holds 45% of the windows; with B = 4 strata of 25% each it can reach 3 rows at most.
  Docs docs = testing::unique_token_docs(300, 1, 20, 5, 1);
  std::vector<int32_t> book(2600);
  for (size_t i = 0; i < book.size(); ++i) book[i] = 100000 + static_cast<int32_t>(i);
  docs.insert(docs.begin() + 150, book);
  testing::write_dataset(path("d"), docs, kVocab, kEos, 1000);
  const int64_t T = 16, B = 4;
  for (bool shuffle : {true, false}) {
    LoaderOptions o = options("d", B, T);
    o.shuffle = shuffle;
    auto l = open(o);
    int full = 0;
    for (const Batch& b : take(*l, 400)) {
      int rows_in_book = 0;
      for (int64_t r = 0; r < B; ++r)
        rows_in_book += std::all_of(b.tokens.begin() + r * T, b.tokens.begin() + (r + 1) * T,
                                    [](int32_t t) { return t >= 100000; });
      full += rows_in_book == B;
    }
    if (shuffle) EXPECT_EQ(full, 0);
    else EXPECT_GT(full, 20);  // the control: in stream order the book fills many batches
  }
}

TEST_F(LoaderTest, CursorRestoreYieldsIdenticalBatchesAcrossEpochsWithAndWithoutPrefetch) {
  make_unique("a", 40, 1, 30, 6, 1);
  make_unique("b", 40, 1, 30, 7, 500000);
  LoaderOptions o = options("a", 3, 12);
  o.stages = {DataStage{0, {DataSource{path("a"), 0.7}, DataSource{path("b"), 0.3}}},
              DataStage{3 * 12 * 25, {DataSource{path("b"), 1.0}}}};
  for (bool prefetch : {true, false}) {
    o.prefetch = prefetch;
    auto first = open(o);
    take(*first, 17);  // enough to cross epochs of both sources later on
    const nlohmann::json cursor = first->cursor();
    const int64_t tokens = first->tokens_seen();
    const std::vector<Batch> expected = take(*first, 40);  // crosses the stage switch and epochs
    for (bool restored_prefetch : {true, false}) {
      LoaderOptions o2 = o;
      o2.prefetch = restored_prefetch;
      auto second = open(o2);
      take(*second, 3);  // a loader that has moved on (and prefetched) still restores exactly
      ASSERT_TRUE(second->restore(cursor).ok());
      EXPECT_EQ(second->tokens_seen(), tokens);
      const std::vector<Batch> got = take(*second, 40);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(same(got[i], expected[i])) << "batch " << i << " prefetch " << prefetch << "->" << restored_prefetch;
    }
    // The cursor survives a text round trip.
    auto third = open(o);
    ASSERT_TRUE(third->restore(nlohmann::json::parse(cursor.dump())).ok());
    Batch b;
    ASSERT_TRUE(third->next(&b).ok());
    EXPECT_TRUE(same(b, expected[0]));
  }
}

TEST_F(LoaderTest, PrefetchOnAndOffGiveIdenticalBatches) {
  make_unique("d", 60, 1, 40, 8);
  LoaderOptions o = options("d", 4, 16);
  o.prefetch = true;
  auto on = open(o);
  o.prefetch = false;
  auto off = open(o);
  const auto a = take(*on, 60), b = take(*off, 60);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(a[i], b[i])) << i;
  EXPECT_EQ(on->cursor(), off->cursor());
}

TEST_F(LoaderTest, MixtureProportionsFollowTheWeights) {
  make_unique("a", 100, 10, 40, 9, 1);
  make_unique("b", 100, 10, 40, 10, 500000);
  LoaderOptions o = options("a", 8, 8);
  o.stages = {DataStage{0, {DataSource{path("a"), 70}, DataSource{path("b"), 30}}}};
  auto l = open(o);
  int64_t from_a = 0, rows = 0;
  for (const Batch& b : take(*l, 500)) {
    for (int64_t r = 0; r < b.B; ++r, ++rows) {
      const int32_t first = b.tokens[static_cast<size_t>(r * b.T)] == kEos ? b.tokens[static_cast<size_t>(r * b.T + 1)]
                                                                             : b.tokens[static_cast<size_t>(r * b.T)];
      from_a += first < 500000;
    }
  }
  const double share = static_cast<double>(from_a) / static_cast<double>(rows);
  EXPECT_NEAR(share, 0.7, 0.03) << rows << " rows";  // 4000 rows: 3 sigma is 0.022
}

TEST_F(LoaderTest, TheStageSwitchesAtTheFirstBatchBoundaryAtOrAfterItsTokenCount) {
  make_unique("a", 60, 1, 30, 11, 1);
  make_unique("b", 60, 1, 30, 12, 500000);
  const int64_t B = 2, T = 8, per_batch = B * T;
  LoaderOptions o = options("a", B, T);
  o.stages = {DataStage{0, {DataSource{path("a"), 1}}}, DataStage{5 * per_batch + 3, {DataSource{path("b"), 1}}}};
  auto l = open(o);
  for (int i = 0; i < 10; ++i) {
    Batch b;
    ASSERT_TRUE(l->next(&b).ok());
    const bool from_b = std::any_of(b.tokens.begin(), b.tokens.end(), [](int32_t t) { return t >= 500000; });
    const bool from_a = std::any_of(b.tokens.begin(), b.tokens.end(), [](int32_t t) { return t != kEos && t < 500000; });
    // Batches 0..5 start below 5·16+3 tokens; batch 6 starts at 96 >= 83.
    EXPECT_EQ(from_b, i >= 6) << "batch " << i;
    EXPECT_EQ(from_a, i < 6) << "batch " << i;
    EXPECT_EQ(l->current_stage(), i >= 6 ? 1 : 0);
  }
  EXPECT_EQ(l->tokens_seen(), 10 * per_batch);
}

TEST_F(LoaderTest, OnePassEndsWithOutOfRangeAndStaysThere) {
  const Docs train = testing::unique_token_docs(5, 1, 5, 13, 1);
  const Docs val = testing::unique_token_docs(30, 1, 20, 14, 1000);
  testing::write_dataset(path("d"), train, kVocab, kEos, 1000, val);
  const int64_t val_tokens = static_cast<int64_t>(testing::stream_of(val, kEos).size());
  for (bool prefetch : {true, false}) {
    LoaderOptions o = options("d", 3, 8);
    o.split = "val";
    o.loop = false;
    o.shuffle = false;
    o.prefetch = prefetch;
    auto l = open(o);
    const int64_t windows = (val_tokens - 1) / 8;
    int batches = 0;
    Batch b;
    Status s;
    while ((s = l->next(&b)).ok()) ++batches;
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
    EXPECT_EQ(batches, windows / 3);  // the incomplete last batch is dropped
    EXPECT_EQ(l->next(&b).code(), StatusCode::kOutOfRange);
  }
}

TEST_F(LoaderTest, BadOptionsAreErrorsNamingTheField) {
  make_unique("d", 10, 1, 10, 15);
  auto expect_error = [&](LoaderOptions o, StatusCode code, const std::string& fragment) {
    auto l = Loader::open(o);
    ASSERT_FALSE(l.ok()) << fragment;
    EXPECT_EQ(l.status().code(), code) << l.status().ToString();
    EXPECT_NE(l.status().message().find(fragment), std::string::npos) << l.status().ToString();
  };
  LoaderOptions o = options("d", 2, 4);
  LoaderOptions bad = o;
  bad.split = "test";
  expect_error(bad, StatusCode::kInvalidArgument, "split 'test'");
  bad = o;
  bad.rank = 2;
  bad.world = 2;
  expect_error(bad, StatusCode::kInvalidArgument, "rank 2");
  bad = o;
  bad.seq = 0;
  expect_error(bad, StatusCode::kInvalidArgument, "seq 0");
  bad = o;
  bad.stages = {};
  expect_error(bad, StatusCode::kInvalidArgument, "at least one data stage");
  bad = o;
  bad.stages[0].start_tokens = 5;
  expect_error(bad, StatusCode::kInvalidArgument, "the first must start at 0");
  bad = o;
  bad.stages[0].sources[0].weight = -1;
  expect_error(bad, StatusCode::kInvalidArgument, "weight");
  bad = o;
  bad.stages.push_back(DataStage{0, {DataSource{path("d"), 1}}});
  expect_error(bad, StatusCode::kInvalidArgument, "not after stage 0");
  bad = o;
  bad.seq = 100000;
  expect_error(bad, StatusCode::kFailedPrecondition, path("d"));
  bad = o;
  bad.stages[0].sources[0].path = path("missing");
  expect_error(bad, StatusCode::kNotFound, path("missing"));
}

TEST_F(LoaderTest, DatasetsOfDifferentTokenizersCannotBeMixed) {
  make_unique("a", 20, 1, 10, 16);
  testing::write_dataset(path("other"), testing::unique_token_docs(20, 1, 10, 17), kVocab, kEos, 1000, {}, "other");
  LoaderOptions o = options("a", 2, 4);
  o.stages[0].sources.push_back(DataSource{path("other"), 1});
  auto l = Loader::open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(l.status().hint().find("same tokenizer"), std::string::npos);
}

TEST_F(LoaderTest, ACursorFromAnotherScheduleIsRefused) {
  make_unique("d", 20, 1, 10, 18);
  auto l = open(options("d", 2, 4));
  take(*l, 2);
  nlohmann::json c = l->cursor();
  auto other = open(options("d", 2, 5));
  Status s = other->restore(c);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("seq = 4"), std::string::npos) << s.ToString();
  nlohmann::json broken = c;
  broken["rng"][0] = "xyz";
  EXPECT_EQ(l->restore(broken).code(), StatusCode::kInvalidArgument);
  broken = c;
  broken["sources"][0]["content"] = hex64(1);
  EXPECT_EQ(l->restore(broken).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(l->restore(nlohmann::json::array()).code(), StatusCode::kInvalidArgument);
  // A refused cursor leaves the loader where it was.
  auto fresh = open(options("d", 2, 4));
  ASSERT_TRUE(fresh->restore(c).ok());
  Batch a, b;
  ASSERT_TRUE(l->next(&a).ok());
  ASSERT_TRUE(fresh->next(&b).ok());
  EXPECT_TRUE(same(a, b));
}

// Found by tests/fuzz/loader_cursor_fuzz (UBSan): a cursor whose counters were near 2^63 (epoch,
// tokens_seen, batches) was accepted, and the next batch overflowed them (signed overflow in next()).
TEST_F(LoaderTest, ACursorWithHugeCountersIsRefused) {
  make_unique("d", 20, 1, 10, 19);
  auto l = open(options("d", 2, 4));
  take(*l, 2);
  const nlohmann::json c = l->cursor();
  const int64_t huge = std::numeric_limits<int64_t>::max();
  for (const char* key : {"tokens_seen", "batches"}) {
    nlohmann::json broken = c;
    broken[key] = huge;
    Status s = l->restore(broken);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(s.message().find(key), std::string::npos) << s.ToString();
  }
  nlohmann::json broken = c;
  broken["sources"][0]["epoch"] = huge;
  Status s = l->restore(broken);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sources[0].epoch"), std::string::npos) << s.ToString();
  broken["sources"][0]["epoch"] = (int64_t{1} << 53) - 1;  // the largest accepted: next() still works
  ASSERT_TRUE(l->restore(broken).ok());
  Batch b;
  EXPECT_TRUE(l->next(&b).ok());
}

TEST_F(LoaderTest, ACorruptTokenIsCaughtAtOpenOrWhenRead) {
  testing::write_dataset(path("d"), {{1, 2, 3, 4, 5, 6, 7}, {8, 9}}, 100, kEos, 1000);
  // Make token 2 out of range, keeping both checksums valid so only the range check can object.
  const std::string shard = path("d/train-000000.bin");
  std::string bytes = testing::read_bytes(shard);
  const uint16_t bad = 4000;
  std::memcpy(&bytes[kShardHeaderBytes + 4], &bad, 2);
  const uint64_t data = xxh64(bytes.data() + kShardHeaderBytes, bytes.size() - kShardHeaderBytes);
  std::memcpy(&bytes[offsetof(ShardHeader, data_checksum)], &data, 8);
  const uint64_t header = xxh64(bytes.data(), offsetof(ShardHeader, header_checksum));
  std::memcpy(&bytes[offsetof(ShardHeader, header_checksum)], &header, 8);
  testing::write_bytes(shard, bytes);
  nlohmann::json m = nlohmann::json::parse(testing::read_bytes(path("d/manifest.json")));
  m["splits"]["train"]["shards"][0]["checksum"] = hex64(data);
  testing::write_bytes(path("d/manifest.json"), m.dump());

  LoaderOptions o = options("d", 1, 9);
  o.shuffle = false;
  auto verified = Loader::open(o);
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.status().message().find(shard), std::string::npos) << verified.status().ToString();
  o.verify = false;
  auto l = open(o);
  Batch b;
  Status s = l->next(&b);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(shard), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("offset 2"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace lmt::data
