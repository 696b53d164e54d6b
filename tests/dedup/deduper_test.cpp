// MinHashDeduper: clusters, spilling to disk, worker-count determinism, verification and errors.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include <filesystem>

#include "common/files.h"
#include "dedup/planted_corpus.h"
#include "lmt/base/rng.h"
#include "lmt/dedup/minhash.h"

namespace lmt::dedup {
namespace {

using testing::TokenSource;
using testing::planted_pair;

class DeduperTest : public test::ScratchDirTest {
 protected:
  // A corpus with clusters of several sizes: 300 planted pairs at J in {0.9, 0.8, 0.6}, 40 families
  // of 5 texts (a base and 4 variants with its prefix, J ~ 0.9 with the base), exact copies, and
  // unrelated texts; then shuffled with a fixed seed.
  void make_corpus() {
    TokenSource tokens;
    std::vector<std::string> texts;
    for (int i = 0; i < 300; ++i) {
      auto [a, b] = planted_pair(tokens, i % 3 == 0 ? 90 : i % 3 == 1 ? 80 : 60, 100);
      texts.push_back(a);
      texts.push_back(b);
    }
    for (int f = 0; f < 40; ++f) {
      const std::string base = tokens.words(100);
      texts.push_back(base);
      for (int v = 0; v < 4; ++v) texts.push_back(base + " " + tokens.words(5));
    }
    for (int i = 0; i < 50; ++i) {
      const std::string t = tokens.words(30);
      texts.push_back(t);
      texts.push_back(t);
    }
    for (int i = 0; i < 200; ++i) texts.push_back(tokens.words(3 + i % 50));
    Rng rng(3);
    for (size_t i = texts.size() - 1; i > 0; --i) std::swap(texts[i], texts[rng.below(i + 1)]);
    texts_ = std::move(texts);
  }

  StatusOr<DedupResult> run(MinHashOptions o, int64_t stride = 1) {
    o.work_dir = dir_;
    LMT_ASSIGN_OR_RETURN(auto d, MinHashDeduper::create(o));
    for (size_t i = 0; i < texts_.size(); ++i) {
      LMT_RETURN_IF_ERROR(d->add(static_cast<int64_t>(i) * stride, minhash_signature(texts_[i], o)));
    }
    return d->finish([&](int64_t doc) { return texts_[doc / stride]; });
  }

  std::vector<std::string> texts_;
};

void expect_same(const DedupResult& a, const DedupResult& b) {
  EXPECT_EQ(a.removed, b.removed);
  EXPECT_EQ(a.kept_for, b.kept_for);
  EXPECT_EQ(a.candidate_pairs, b.candidate_pairs);
  EXPECT_EQ(a.verified_pairs, b.verified_pairs);
  EXPECT_EQ(a.rejected_pairs, b.rejected_pairs);
  EXPECT_EQ(a.clusters, b.clusters);
}

TEST_F(DeduperTest, ClustersKeepTheirSmallestIndex) {
  make_corpus();
  auto r = run(MinHashOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->removed.size(), r->kept_for.size());
  EXPECT_TRUE(std::is_sorted(r->removed.begin(), r->removed.end()));
  for (size_t i = 0; i < r->removed.size(); ++i) {
    EXPECT_LT(r->kept_for[i], r->removed[i]);
    // A kept document is never itself removed.
    EXPECT_FALSE(std::binary_search(r->removed.begin(), r->removed.end(), r->kept_for[i]));
  }
  // Exact copies always collide in every band: each of the 50 copies is removed for its twin.
  for (size_t i = 0; i < texts_.size(); ++i) {
    for (size_t j = i + 1; j < texts_.size(); ++j) {
      if (texts_[i] != texts_[j]) continue;
      auto it = std::lower_bound(r->removed.begin(), r->removed.end(), static_cast<int64_t>(j));
      ASSERT_TRUE(it != r->removed.end() && *it == static_cast<int64_t>(j)) << "copy " << j << " of " << i;
      EXPECT_EQ(r->kept_for[it - r->removed.begin()], static_cast<int64_t>(i));
    }
  }
  // Families of 5 nearly always end up in a single cluster (J with the base ~0.91 each).
  EXPECT_GE(r->clusters, 50 + 40);
  EXPECT_GT(r->removed.size(), 50u + 40 * 4 * 9 / 10);
  EXPECT_EQ(r->spilled_runs, 0);
}

TEST_F(DeduperTest, SpillingGivesTheSameResultAsInMemoryForAnyWorkerCount) {
  make_corpus();
  MinHashOptions o;
  o.workers = 1;
  auto memory = run(o);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  ASSERT_EQ(memory->spilled_runs, 0);
  // Budget 1000 bytes: a run every 5 documents (14 records of 16 bytes each), over 64 runs per band,
  // so the merge goes through intermediate runs (fan-in 64).
  const std::pair<int64_t, int64_t> configs[] = {
      {3, int64_t{256} << 20}, {1, int64_t{16} << 10}, {3, int64_t{16} << 10}, {8, int64_t{16} << 10}, {3, 1000}};
  for (const auto& [workers, budget] : configs) {
    o.workers = workers;
    o.memory_budget_bytes = budget;
    auto r = run(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    SCOPED_TRACE("workers " + std::to_string(workers) + " budget " + std::to_string(budget));
    expect_same(*memory, *r);
    if (budget < (1 << 20)) {
      EXPECT_GT(r->spilled_runs, 1);
    }
    if (budget == 1000) {
      EXPECT_EQ(r->spilled_runs, (static_cast<int64_t>(texts_.size()) + 4) / 5);
    }
  }
  // The spill directories are gone with their dedupers.
  EXPECT_TRUE(entries().empty());
}

TEST_F(DeduperTest, VerifiedSpillingIsDeterministicToo) {
  make_corpus();
  MinHashOptions o;
  o.verify = true;
  o.workers = 1;
  auto memory = run(o);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  o.workers = 4;
  o.memory_budget_bytes = 8 << 10;
  auto spilled = run(o);
  ASSERT_TRUE(spilled.ok()) << spilled.status().ToString();
  EXPECT_GT(spilled->spilled_runs, 1);
  expect_same(*memory, *spilled);
}

TEST_F(DeduperTest, DocumentIndicesNeedNotBeContiguous) {
  make_corpus();
  auto dense = run(MinHashOptions{});
  auto sparse = run(MinHashOptions{}, 7);
  ASSERT_TRUE(dense.ok() && sparse.ok());
  ASSERT_EQ(dense->removed.size(), sparse->removed.size());
  for (size_t i = 0; i < dense->removed.size(); ++i) {
    EXPECT_EQ(sparse->removed[i], dense->removed[i] * 7);
    EXPECT_EQ(sparse->kept_for[i], dense->kept_for[i] * 7);
  }
}

TEST_F(DeduperTest, VerifyRemovesFalseCandidates) {
  // One band of one row per hash, 14 bands: a pair at J = 0.5 collides with probability 1 - 0.5^14.
  TokenSource tokens;
  const auto [a, b] = planted_pair(tokens, 50, 100);
  const auto [c, d] = planted_pair(tokens, 90, 100);
  texts_ = {a, b, c, d};
  MinHashOptions o;
  o.bands = 14;
  o.rows = 1;
  auto loose = run(o);
  ASSERT_TRUE(loose.ok());
  EXPECT_EQ(loose->removed, (std::vector<int64_t>{1, 3}));
  o.verify = true;
  auto strict = run(o);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict->removed, (std::vector<int64_t>{3}));
  EXPECT_EQ(strict->kept_for, (std::vector<int64_t>{2}));
  EXPECT_EQ(strict->rejected_pairs, 1);
  EXPECT_EQ(strict->verified_pairs, 1);
  EXPECT_EQ(strict->clusters, 1);
}

TEST_F(DeduperTest, BadInputIsAnError) {
  MinHashOptions o;
  o.work_dir = dir_ + "/missing";
  auto missing = MinHashDeduper::create(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(o.work_dir), std::string::npos);
  test::write_bytes(path("file"), "x");
  o.work_dir = path("file");
  EXPECT_EQ(MinHashDeduper::create(o).status().code(), StatusCode::kNotFound);
  o.work_dir = "";
  EXPECT_EQ(MinHashDeduper::create(o).status().code(), StatusCode::kInvalidArgument);
  o.work_dir = dir_;
  o.bands = 0;
  EXPECT_EQ(MinHashDeduper::create(o).status().code(), StatusCode::kInvalidArgument);
  o.bands = 14;

  auto d = MinHashDeduper::create(o);
  ASSERT_TRUE(d.ok());
  const std::vector<uint64_t> sig = minhash_signature("some text here", o);
  EXPECT_TRUE((*d)->add(5, sig).ok());
  Status s = (*d)->add(5, sig);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("after document 5"), std::string::npos);
  EXPECT_EQ((*d)->add(6, std::span<const uint64_t>(sig).first(100)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*d)->add(9, sig).ok());
  auto r = (*d)->finish();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->removed, (std::vector<int64_t>{9}));
  EXPECT_EQ(r->kept_for, (std::vector<int64_t>{5}));
  EXPECT_EQ((*d)->finish().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*d)->add(10, sig).code(), StatusCode::kFailedPrecondition);

  o.verify = true;
  auto v = MinHashDeduper::create(o);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->finish().status().code(), StatusCode::kInvalidArgument);  // verify needs text_of
}

TEST_F(DeduperTest, ASpillRunRemovedUnderItIsReportedNotCrashed) {
  make_corpus();
  MinHashOptions o;
  o.work_dir = dir_;
  o.memory_budget_bytes = 16 << 10;
  auto d = MinHashDeduper::create(o);
  ASSERT_TRUE(d.ok());
  for (size_t i = 0; i < texts_.size(); ++i) ASSERT_TRUE((*d)->add(i, minhash_signature(texts_[i], o)).ok());
  // Truncate one run file behind the deduper's back.
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
    if (e.is_regular_file()) victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty());
  std::filesystem::resize_file(victim, 16 * 3 + 5);
  auto r = (*d)->finish();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(victim), std::string::npos) << r.status().ToString();
}

TEST_F(DeduperTest, AFailedSpillWriteIsAnIoErrorNamingTheFile) {
  // A file-size limit makes write(2) fail with EFBIG (SIGXFSZ ignored), as a full disk fails it with
  // ENOSPC: the spill must report the run file and a hint, and leave nothing behind.
  make_corpus();
  MinHashOptions o;
  o.work_dir = dir_;
  o.memory_budget_bytes = 64 << 10;  // a spill writes ~4096 / 14 records (4.7 KB) per band file
  auto d = MinHashDeduper::create(o);
  ASSERT_TRUE(d.ok());
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 1000;
  sighandler_t old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status failure;
  for (size_t i = 0; i < texts_.size() && failure.ok(); ++i) failure = (*d)->add(i, minhash_signature(texts_[i], o));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(failure.ok());
  EXPECT_EQ(failure.code(), StatusCode::kIoError);
  EXPECT_NE(failure.message().find(dir_ + "/lmt-minhash-"), std::string::npos) << failure.ToString();
  EXPECT_NE(failure.message().find("/band"), std::string::npos) << failure.ToString();
  EXPECT_NE(failure.hint().find("disk space"), std::string::npos);
  d->reset();
  EXPECT_TRUE(entries().empty()) << "the spill directory is removed with the deduper";
}

}  // namespace
}  // namespace lmt::dedup
