// Shards and datasets on disk: the checksum, round trips at both token widths, documents that
// cross shards, and every kind of damage (each error must name the file).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>

#include "data_test_util.h"
#include "lmt/base/xxh64.h"
#include "lmt/data/dataset.h"
#include "lmt/data/shard.h"

namespace lmt::data {
namespace {

using testing::Docs;
using testing::read_bytes;
using testing::write_bytes;

TEST(Xxh64, MatchesTheReferenceImplementation) {
  // Reference values from libxxhash 0.8.1 XXH64().
  EXPECT_EQ(xxh64("", 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxh64("abc", 3), 0x44bc2cf5ad770999ull);
  const char* s = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxh64(s, std::strlen(s)), 0xfbcea83c8a378bf1ull);
  uint8_t bytes[100];
  for (int i = 0; i < 100; ++i) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(xxh64(bytes, 100), 0x6ac1e58032166597ull);
  EXPECT_EQ(xxh64(bytes, 100, 2654435761ull), 0x8832442a88284f11ull);
  EXPECT_EQ(hex64(0x6ac1e58032166597ull), "6ac1e58032166597");
}

TEST(Xxh64, StreamingInPiecesEqualsOneShot) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t piece : {1, 3, 8, 31, 32, 33, 100}) {
    Xxh64 h(5);
    for (size_t i = 0; i < data.size(); i += piece) h.update(data.data() + i, std::min(piece, data.size() - i));
    EXPECT_EQ(h.digest(), xxh64(data.data(), data.size(), 5)) << "piece " << piece;
  }
}

class ShardTest : public testing::ScratchDirTest {
 protected:
  // Writes one shard of `docs` (each followed by EOS) and returns its path.
  std::string write_shard(const std::string& name, const Docs& docs, int64_t vocab, int32_t eos) {
    auto w = ShardWriter::create(path(name), ShardSpec{vocab, eos});
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& d : docs) {
      w->start_document();
      EXPECT_TRUE(w->append(d).ok());
      EXPECT_TRUE(w->append(std::vector<int32_t>{eos}).ok());
    }
    auto s = w->finish();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return path(name);
  }
  std::string good_shard() { return write_shard("good.bin", {{1, 2, 3}, {4, 5}, {6}}, 100, 0); }

  // Applies `mutate` to the file's bytes, then recomputes both checksums so that only the mutated
  // property is wrong.
  static void rewrite_consistently(const std::string& p, const std::function<void(std::string&)>& mutate) {
    std::string b = read_bytes(p);
    mutate(b);
    const uint64_t data = xxh64(b.data() + kShardHeaderBytes, b.size() - kShardHeaderBytes);
    std::memcpy(&b[offsetof(ShardHeader, data_checksum)], &data, 8);
    const uint64_t header = xxh64(b.data(), offsetof(ShardHeader, header_checksum));
    std::memcpy(&b[offsetof(ShardHeader, header_checksum)], &header, 8);
    write_bytes(p, b);
  }

  static void expect_data_loss(const std::string& p, const std::string& fragment, Verify verify = Verify::kFull) {
    auto r = ShardReader::open(p, verify);
    ASSERT_FALSE(r.ok()) << "opened a damaged shard: " << fragment;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << "error must name the file: " << r.status().ToString();
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
    EXPECT_FALSE(r.status().hint().empty());
  }
};

TEST_F(ShardTest, RoundTripsUint16WithTheDocumentIndex) {
  const std::string p = good_shard();
  auto r = ShardReader::open(p, Verify::kFull);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->token_bytes(), 2u);
  EXPECT_EQ(r->vocab_size(), 100);
  EXPECT_EQ(r->eos_id(), 0);
  ASSERT_EQ(r->token_count(), 9);
  std::vector<int32_t> all(9);
  r->read(0, 9, all.data());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 0, 4, 5, 0, 6, 0}));
  EXPECT_EQ(std::vector<uint64_t>(r->doc_starts().begin(), r->doc_starts().end()), (std::vector<uint64_t>{0, 4, 7}));
  EXPECT_EQ(std::filesystem::file_size(p), kShardHeaderBytes + 24 + 3 * 8);  // 18 token bytes padded to 24
}

TEST_F(ShardTest, LargeVocabulariesUseUint32) {
  const std::string p = write_shard("wide.bin", {{70000, 65536, 1}}, 100000, 99999);
  auto r = ShardReader::open(p, Verify::kFull);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->token_bytes(), 4u);
  EXPECT_EQ(r->token(0), 70000);
  EXPECT_EQ(r->token(3), 99999);
  EXPECT_EQ(token_bytes_for_vocab(65536), 2u);
  EXPECT_EQ(token_bytes_for_vocab(65537), 4u);
}

// Found by tests/fuzz/shard_fuzz (UBSan): reading the zero tokens of an empty 4-byte shard into an
// empty vector called memcpy(nullptr, ..., 0), which is undefined behaviour.
TEST_F(ShardTest, ReadingNothingFromAnEmptyShardIsFine) {
  for (int64_t vocab : {100, 100000}) {
    const std::string p = write_shard("empty_" + std::to_string(vocab) + ".bin", {}, vocab, 0);
    auto r = ShardReader::open(p, Verify::kFull);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->token_count(), 0);
    std::vector<int32_t> none;
    r->read(0, 0, none.data());
    EXPECT_TRUE(r->doc_starts().empty());
  }
}

TEST_F(ShardTest, WriterNeverOverwritesAFile) {
  write_bytes(path("x.bin"), "keep");
  auto w = ShardWriter::create(path("x.bin"), ShardSpec{10, 0});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(path("x.bin")), std::string::npos);
  EXPECT_EQ(read_bytes(path("x.bin")), "keep");
}

TEST_F(ShardTest, AnUnfinishedWriterLeavesNoFile) {
  {
    auto w = ShardWriter::create(path("partial.bin"), ShardSpec{10, 0});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append(std::vector<int32_t>{1, 2}).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path("partial.bin")));
}

TEST_F(ShardTest, BadMagicIsAnErrorNamingTheFile) {
  const std::string p = good_shard();
  rewrite_consistently(p, [](std::string& b) { b[0] = 'X'; });
  expect_data_loss(p, "bad magic", Verify::kHeader);
}

TEST_F(ShardTest, TruncatedFilesAreErrorsNamingTheFile) {
  const std::string p = good_shard();
  const std::string bytes = read_bytes(p);
  for (size_t keep : {size_t{0}, size_t{10}, kShardHeaderBytes - 1}) {
    write_bytes(p, bytes.substr(0, keep));
    expect_data_loss(p, "truncated", Verify::kHeader);
  }
  for (size_t keep : {kShardHeaderBytes, kShardHeaderBytes + 7, bytes.size() - 1}) {
    write_bytes(p, bytes.substr(0, keep));
    expect_data_loss(p, "size mismatch", Verify::kHeader);
  }
}

TEST_F(ShardTest, ExtraBytesAreASizeMismatch) {
  const std::string p = good_shard();
  write_bytes(p, read_bytes(p) + std::string(8, '\0'));
  expect_data_loss(p, "size mismatch", Verify::kHeader);
}

TEST_F(ShardTest, ACountThatOverflowsIsASizeMismatchNotACrash) {
  const std::string p = good_shard();
  rewrite_consistently(p, [](std::string& b) {
    const uint64_t huge = ~uint64_t{0} / 2;
    std::memcpy(&b[offsetof(ShardHeader, token_count)], &huge, 8);
  });
  expect_data_loss(p, "size mismatch", Verify::kHeader);
}

TEST_F(ShardTest, AFlippedTokenIsAChecksumMismatchOnlyUnderFullVerification) {
  const std::string p = good_shard();
  std::string b = read_bytes(p);
  b[kShardHeaderBytes + 2] ^= 0x01;  // token 1: 2 -> 3
  write_bytes(p, b);
  EXPECT_TRUE(ShardReader::open(p, Verify::kHeader).ok());
  expect_data_loss(p, "checksum mismatch");
}

TEST_F(ShardTest, ADamagedHeaderFieldIsAHeaderChecksumMismatch) {
  const std::string p = good_shard();
  std::string b = read_bytes(p);
  b[offsetof(ShardHeader, vocab_size)] ^= 0x40;
  write_bytes(p, b);
  expect_data_loss(p, "header checksum mismatch", Verify::kHeader);
}

TEST_F(ShardTest, ANewerVersionIsRefused) {
  const std::string p = good_shard();
  rewrite_consistently(p, [](std::string& b) { b[offsetof(ShardHeader, version)] = 2; });
  expect_data_loss(p, "format version 2", Verify::kHeader);
}

TEST_F(ShardTest, ATokenOutsideTheVocabularyIsAnErrorNamingTheOffset) {
  const std::string p = good_shard();
  rewrite_consistently(p, [](std::string& b) {
    const uint16_t bad = 100;  // vocab is 100
    std::memcpy(&b[kShardHeaderBytes + 2 * 4], &bad, 2);  // token 4
  });
  expect_data_loss(p, "token id 100 at offset 4 is outside the vocabulary");
}

TEST_F(ShardTest, TheDocIndexMustAgreeWithEos) {
  const std::string p = good_shard();
  const std::string bytes = read_bytes(p);
  const size_t index_at = kShardHeaderBytes + 24;
  rewrite_consistently(p, [&](std::string& b) {
    const uint64_t start = 5;  // document 1 really starts at 4
    std::memcpy(&b[index_at + 8], &start, 8);
  });
  expect_data_loss(p, "EOS at offset 3 is not followed by a document start");
  write_bytes(p, bytes);
  rewrite_consistently(p, [&](std::string& b) {
    const uint16_t not_eos = 7;
    std::memcpy(&b[kShardHeaderBytes + 2 * 3], &not_eos, 2);  // the EOS ending document 0
  });
  expect_data_loss(p, "token before it is not EOS");
  write_bytes(p, bytes);
  rewrite_consistently(p, [&](std::string& b) {
    const uint64_t start = 4;  // entries must increase
    std::memcpy(&b[index_at + 16], &start, 8);
  });
  expect_data_loss(p, "not after the previous entry", Verify::kHeader);
}

TEST_F(ShardTest, AMissingShardIsNotFound) {
  auto r = ShardReader::open(path("nope.bin"), Verify::kFull);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path("nope.bin")), std::string::npos);
}

// ---- datasets ----------------------------------------------------------------------------------------

TEST_F(ShardTest, DocumentsContinueAcrossShardsAndTheStreamReadsBackWhole) {
  const Docs docs = testing::unique_token_docs(40, 0, 23, 7);
  testing::write_dataset(path("ds"), docs, 5000, 0, /*shard_tokens=*/17);
  auto d = Dataset::open(path("ds"), "train", Verify::kFull);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const std::vector<int32_t> want = testing::stream_of(docs, 0);
  ASSERT_EQ((*d)->token_count(), static_cast<int64_t>(want.size()));
  EXPECT_EQ((*d)->document_count(), 40);
  EXPECT_GT((*d)->shards().size(), 10u);
  std::vector<int32_t> got(want.size());
  (*d)->read(0, static_cast<int64_t>(got.size()), got.data());
  EXPECT_EQ(got, want);
  for (const ShardReader& s : (*d)->shards()) EXPECT_LE(s.token_count(), 17);
  std::vector<int32_t> middle(30);
  (*d)->read(13, 30, middle.data());  // spans three shards
  EXPECT_TRUE(std::equal(middle.begin(), middle.end(), want.begin() + 13));
}

TEST_F(ShardTest, AShardFromAnotherDatasetIsCaughtByTheManifest) {
  testing::write_dataset(path("a"), testing::unique_token_docs(5, 3, 9, 1), 100, 0, 10);
  testing::write_dataset(path("b"), testing::unique_token_docs(5, 3, 9, 2), 100, 0, 10);
  std::filesystem::copy_file(path("b/train-000000.bin"), path("a/train-000000.bin"),
                             std::filesystem::copy_options::overwrite_existing);
  auto d = Dataset::open(path("a"), "train", Verify::kHeader);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find(path("a/train-000000.bin")), std::string::npos) << d.status().ToString();
}

TEST_F(ShardTest, AMissingShardOrManifestNamesWhatIsMissing) {
  testing::write_dataset(path("a"), testing::unique_token_docs(5, 3, 9, 1), 100, 0, 10);
  std::filesystem::remove(path("a/train-000001.bin"));
  auto d = Dataset::open(path("a"), "train", Verify::kHeader);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("train-000001.bin"), std::string::npos);
  auto none = Dataset::open(path("nothing"), "train", Verify::kHeader);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  std::filesystem::create_directory(path("empty"));
  auto empty = Dataset::open(path("empty"), "train", Verify::kHeader);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("manifest.json"), std::string::npos);
}

TEST_F(ShardTest, AManifestWithAMissingKeyNamesTheKey) {
  testing::write_dataset(path("a"), testing::unique_token_docs(5, 3, 9, 1), 100, 0, 10);
  nlohmann::json j = nlohmann::json::parse(read_bytes(path("a/manifest.json")));
  j["splits"]["train"]["shards"][0].erase("checksum");
  write_bytes(path("a/manifest.json"), j.dump());
  auto d = Dataset::open(path("a"), "train", Verify::kHeader);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("splits.train.shards[0].checksum"), std::string::npos) << d.status().ToString();
  EXPECT_NE(d.status().message().find("manifest.json"), std::string::npos);
}

// Found by tests/fuzz/dataset_manifest_fuzz (UBSan): two shards whose counts were near 2^63 made
// the sum over the split's shards overflow (signed overflow) before the counts were compared.
TEST_F(ShardTest, ShardCountsThatOverflowTheirSumAreAnErrorNamingTheShard) {
  testing::write_dataset(path("a"), testing::unique_token_docs(10, 3, 9, 1), 100, 0, 10);
  nlohmann::json j = nlohmann::json::parse(read_bytes(path("a/manifest.json")));
  ASSERT_GE(j["splits"]["train"]["shards"].size(), 2u);
  for (const char* key : {"tokens", "documents"}) {
    nlohmann::json broken = j;
    broken["splits"]["train"]["shards"][0][key] = std::numeric_limits<int64_t>::max();
    broken["splits"]["train"]["shards"][1][key] = std::numeric_limits<int64_t>::max();
    write_bytes(path("a/manifest.json"), broken.dump());
    auto d = Dataset::open(path("a"), "train", Verify::kHeader);
    ASSERT_FALSE(d.ok()) << key;
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find("splits.train.shards[1]"), std::string::npos) << d.status().ToString();
    EXPECT_NE(d.status().message().find("overflow"), std::string::npos) << d.status().ToString();
    EXPECT_FALSE(d.status().hint().empty());
  }
}

TEST_F(ShardTest, AnEmptySplitIsAFailedPreconditionWithAHint) {
  testing::write_dataset(path("a"), testing::unique_token_docs(5, 3, 9, 1), 100, 0, 10);
  auto d = Dataset::open(path("a"), "val", Verify::kFull);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().hint().find("--val-fraction"), std::string::npos);
}

TEST_F(ShardTest, TheWriterRefusesANonEmptyDirectoryAndLeavesItAlone) {
  std::filesystem::create_directory(path("busy"));
  write_bytes(path("busy/mine.txt"), "precious");
  DatasetSpec spec;
  spec.vocab_size = 10;
  auto w = DatasetWriter::create(path("busy"), spec);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not empty"), std::string::npos);
  EXPECT_EQ(read_bytes(path("busy/mine.txt")), "precious");
}

TEST_F(ShardTest, AnUncommittedWriterLeavesNothingBehind) {
  DatasetSpec spec;
  spec.vocab_size = 10;
  spec.shard_tokens = 2;
  {
    auto w = DatasetWriter::create(path("out"), spec);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->add_document(Split::kTrain, std::vector<int32_t>{1, 2, 3}).ok());
  }
  EXPECT_EQ(entries(), std::vector<std::string>{});
}

TEST_F(ShardTest, TheWriterRejectsIdsOutsideTheVocabularyAndEosInsideADocument) {
  DatasetSpec spec;
  spec.vocab_size = 10;
  spec.eos_id = 9;
  auto w = DatasetWriter::create(path("out"), spec);
  ASSERT_TRUE(w.ok());
  Status bad = (*w)->add_document(Split::kTrain, std::vector<int32_t>{1, 10});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("token id 10 at index 1"), std::string::npos) << bad.ToString();
  Status eos = (*w)->add_document(Split::kTrain, std::vector<int32_t>{9, 1});
  EXPECT_NE(eos.message().find("EOS"), std::string::npos) << eos.ToString();
  EXPECT_EQ((*w)->split_info(Split::kTrain).tokens, 0);  // nothing was written
}

}  // namespace
}  // namespace lmt::data
