// Preparation: inputs -> documents -> tokens -> shards + manifest, with a byte-level test tokenizer
// (ids = bytes, EOS = 256), so every expected token is known exactly.
#include "lmt/data/prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data_test_util.h"
#include "lmt/data/dataset.h"

namespace lmt::data {
namespace {

using testing::read_bytes;
using testing::write_bytes;

std::vector<int32_t> bytes_then_eos(const std::string& s) {
  std::vector<int32_t> ids(s.begin(), s.end());
  for (auto& id : ids) id = static_cast<unsigned char>(id);
  ids.push_back(256);
  return ids;
}

// Every file of a dataset directory, name -> bytes.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    files[e.path().filename().string()] = read_bytes(e.path().string());
  return files;
}

std::vector<int32_t> read_split(const std::string& dir, const std::string& split) {
  auto d = Dataset::open(dir, split, Verify::kFull);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (!d.ok()) return {};
  std::vector<int32_t> ids(static_cast<size_t>((*d)->token_count()));
  (*d)->read(0, (*d)->token_count(), ids.data());
  return ids;
}

class PrepareTest : public testing::ScratchDirTest {
 protected:
  PrepareOptions options(const std::vector<std::string>& inputs, const std::string& out) {
    PrepareOptions o;
    for (const auto& i : inputs) o.inputs.push_back(path(i));
    o.out = path(out);
    o.val_fraction = 0;
    o.workers = 2;
    o.tokenizer_path = "bytes";
    return o;
  }
  testing::ByteTokenizer tok_;
};

TEST_F(PrepareTest, TextJsonlAndDirectoriesBecomeDocumentsFollowedByEos) {
  write_bytes(path("a.txt"), "first file\nstill the first document\n");
  write_bytes(path("b.jsonl"), "{\"text\": \"line one\", \"id\": 1}\n\n{\"text\": \"caf\\u00e9\"}\n");
  std::filesystem::create_directories(path("dir/sub"));
  write_bytes(path("dir/sub/z.txt"), "zed");
  write_bytes(path("dir/m.txt"), "em");
  write_bytes(path("dir/.hidden"), "never read");
  auto r = prepare_dataset(options({"a.txt", "b.jsonl", "dir"}, "out"), tok_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<int32_t> want;
  for (const char* doc : {"first file\nstill the first document\n", "line one", "caf\xc3\xa9", "em", "zed"}) {
    const auto ids = bytes_then_eos(doc);
    want.insert(want.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(read_split(path("out"), "train"), want);
  EXPECT_EQ(r->documents, 5);
  EXPECT_EQ(r->manifest.train.documents, 5);
  EXPECT_EQ(r->manifest.vocab_size, 257);
  EXPECT_EQ(r->manifest.eos_id, 256);
  EXPECT_EQ(r->manifest.token_bytes, 2u);
  EXPECT_EQ(r->manifest.tokenizer_fingerprint, "byte-tokenizer-v1");
  const nlohmann::json& sources = r->manifest.preparation["sources"];
  ASSERT_EQ(sources.size(), 4u);  // a.txt, b.jsonl, dir/m.txt, dir/sub/z.txt
  EXPECT_EQ(sources[1]["format"], "jsonl");
  EXPECT_EQ(sources[1]["documents"], 2);
  EXPECT_EQ(sources[2]["path"], path("dir/m.txt"));
}

TEST_F(PrepareTest, OutputIsByteIdenticalWhateverTheWorkerCount) {
  std::string jsonl;
  for (int i = 0; i < 300; ++i)
    jsonl += nlohmann::json{{"text", std::string(static_cast<size_t>(i * 37 % 500), static_cast<char>('a' + i % 26))}}.dump() + "\n";
  write_bytes(path("c.jsonl"), jsonl);
  std::map<std::string, std::string> reference;
  for (int workers : {1, 2, 3, 8}) {
    PrepareOptions o = options({"c.jsonl"}, "out" + std::to_string(workers));
    o.workers = workers;
    o.val_fraction = 0.1;
    o.shard_tokens = 4096;
    o.max_inflight_bytes = 2000;  // force the read-ahead window to fill and drain many times
    auto r = prepare_dataset(o, tok_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto files = snapshot(o.out);
    EXPECT_GT(files.size(), 4u);
    if (reference.empty()) reference = files;
    // The manifest names its inputs, which are the same file here; everything must match.
    EXPECT_EQ(files, reference) << workers << " workers";
  }
}

TEST_F(PrepareTest, TheValSplitFollowsTheSeededDocumentHash) {
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    texts.push_back("doc " + std::to_string(i));
    jsonl += nlohmann::json{{"text", texts.back()}}.dump() + "\n";
  }
  write_bytes(path("c.jsonl"), jsonl);
  PrepareOptions o = options({"c.jsonl"}, "out");
  o.val_fraction = 0.25;
  o.split_seed = 9;
  auto r = prepare_dataset(o, tok_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<int32_t> train, val;
  for (int i = 0; i < 400; ++i) {
    auto ids = bytes_then_eos(texts[static_cast<size_t>(i)]);
    auto& dst = is_val_document(9, i, 0.25) ? val : train;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(read_split(path("out"), "train"), train);
  EXPECT_EQ(read_split(path("out"), "val"), val);
  EXPECT_NEAR(static_cast<double>(r->manifest.val.documents) / 400, 0.25, 0.06);
  EXPECT_EQ(r->manifest.val.documents + r->manifest.train.documents, 400);
}

// Regression (issue #20): a one-document corpus (tinyshakespeare) used to get no val split whatever
// --val-fraction said; its token tail goes to val now.
TEST_F(PrepareTest, AOneDocumentInputIsSplitByTokensItsTailGoingToVal) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  write_bytes(path("novel.txt"), text);
  PrepareOptions o = options({"novel.txt"}, "out");
  o.val_fraction = 0.1;
  auto r = prepare_dataset(o, tok_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(read_split(path("out"), "train"), bytes_then_eos(text.substr(0, 90)));
  EXPECT_EQ(read_split(path("out"), "val"), bytes_then_eos(text.substr(90)));
  EXPECT_EQ(r->documents, 1);
  // With no val fraction, or a document of one token, nothing is split.
  o.val_fraction = 0;
  o.out = path("out0");
  ASSERT_TRUE(prepare_dataset(o, tok_).ok());
  EXPECT_EQ(read_split(path("out0"), "train"), bytes_then_eos(text));
  write_bytes(path("one.txt"), "x");
  o = options({"one.txt"}, "out1");
  o.val_fraction = 0.5;
  ASSERT_TRUE(prepare_dataset(o, tok_).ok());
  EXPECT_EQ(read_split(path("out1"), "train"), bytes_then_eos("x"));
  // Two documents: whole documents are drawn as before (neither is cut).
  write_bytes(path("two.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"cd\"}\n");
  o = options({"two.jsonl"}, "out2");
  o.val_fraction = 0.5;
  auto r2 = prepare_dataset(o, tok_);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->manifest.train.documents + r2->manifest.val.documents, 2);
}

TEST_F(PrepareTest, EmptyDocumentsAreSkippedAndCounted) {
  write_bytes(path("empty.txt"), "");
  write_bytes(path("e.jsonl"), "{\"text\": \"\"}\n{\"text\": \"x\"}\n{\"text\": \"\"}\n");
  auto r = prepare_dataset(options({"empty.txt", "e.jsonl"}, "out"), tok_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->documents, 1);
  EXPECT_EQ(r->empty_documents, 3);
  EXPECT_EQ(r->manifest.preparation["empty_documents"], 3);
  EXPECT_EQ(read_split(path("out"), "train"), bytes_then_eos("x"));
}

TEST_F(PrepareTest, InputsWithoutTextAreAnErrorAndLeaveNothingBehind) {
  write_bytes(path("empty.txt"), "");
  write_bytes(path("blank.jsonl"), "\n\n");
  auto r = prepare_dataset(options({"empty.txt", "blank.jsonl"}, "out"), tok_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no non-empty document"), std::string::npos) << r.status().ToString();
  std::vector<std::string> left = entries();
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"blank.jsonl", "empty.txt"}));
  std::filesystem::create_directory(path("nothing"));
  auto none = prepare_dataset(options({"nothing"}, "out"), tok_);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("holds no files"), std::string::npos);
}

TEST_F(PrepareTest, BadJsonlNamesTheFileAndLine) {
  write_bytes(path("bad.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  auto r = prepare_dataset(options({"bad.jsonl"}, "out"), tok_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path("bad.jsonl") + ":2"), std::string::npos) << r.status().ToString();
  write_bytes(path("field.jsonl"), "{\"content\": \"ok\"}\n");
  auto f = prepare_dataset(options({"field.jsonl"}, "out"), tok_);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(path("field.jsonl") + ":1: no string field 'text'"), std::string::npos)
      << f.status().ToString();
  EXPECT_NE(f.status().hint().find("--text-field"), std::string::npos);
  PrepareOptions o = options({"field.jsonl"}, "out");
  o.text_field = "content";
  EXPECT_TRUE(prepare_dataset(o, tok_).ok());
}

TEST_F(PrepareTest, MissingAndCompressedInputsAreRefused) {
  auto missing = prepare_dataset(options({"nope.txt"}, "out"), tok_);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path("nope.txt")), std::string::npos);
  write_bytes(path("x.jsonl.gz"), "\x1f\x8b");  // a gzip magic and nothing more: truncated
  auto gz = prepare_dataset(options({"x.jsonl.gz"}, "out"), tok_);
  EXPECT_EQ(gz.status().code(), StatusCode::kDataLoss) << gz.status().ToString();
  EXPECT_NE(gz.status().message().find(path("x.jsonl.gz") + ": truncated gzip stream"), std::string::npos) << gz.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(path("out")));
}

TEST_F(PrepareTest, AnExistingNonEmptyOutputIsNeverTouched) {
  write_bytes(path("a.txt"), "text");
  std::filesystem::create_directory(path("out"));
  write_bytes(path("out/keep"), "mine");
  auto r = prepare_dataset(options({"a.txt"}, "out"), tok_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not empty"), std::string::npos);
  EXPECT_EQ(snapshot(path("out")), (std::map<std::string, std::string>{{"keep", "mine"}}));
  // An existing empty directory is fine (it is replaced atomically).
  std::filesystem::create_directory(path("fresh"));
  EXPECT_TRUE(prepare_dataset(options({"a.txt"}, "fresh"), tok_).ok());
}

// A tokenizer that emits ids it does not own, and EOS from ordinary text.
class BrokenTokenizer : public testing::ByteTokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids = ByteTokenizer::encode(text);
    for (auto& id : ids) {
      if (id == '!') id = 300;  // >= vocab
      if (id == '#') id = 256;  // EOS
    }
    return ids;
  }
};

TEST_F(PrepareTest, TokenIdsOutsideTheVocabularyOrEosInTextAreErrorsNamingTheDocument) {
  BrokenTokenizer broken;
  write_bytes(path("b.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"bang!\"}\n");
  auto r = prepare_dataset(options({"b.jsonl"}, "out"), broken);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path("b.jsonl") + ":2"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("token id 300 at index 4"), std::string::npos) << r.status().ToString();
  write_bytes(path("h.txt"), "a#b");
  auto h = prepare_dataset(options({"h.txt"}, "out"), broken);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find(path("h.txt")), std::string::npos) << h.status().ToString();
  EXPECT_NE(h.status().message().find("EOS"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path("out")));
}

TEST_F(PrepareTest, ProgressReachesTheTotal) {
  write_bytes(path("a.txt"), std::string(10000, 'a'));
  PrepareProgress last;
  int calls = 0;
  auto r = prepare_dataset(options({"a.txt"}, "out"), tok_, [&](const PrepareProgress& p) {
    last = p;
    ++calls;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_GE(calls, 1);
  EXPECT_EQ(last.bytes_done, 10000u);
  EXPECT_EQ(last.bytes_total, 10000u);
  EXPECT_EQ(last.tokens, 10001);
}

// Real text through the shared GPT-2 tokenizer: the shards hold exactly encode(document) + EOS for
// every document, in input order, split as the document hash says.
TEST_F(PrepareTest, RealTextWithTheGpt2TokenizerMatchesEncodePerDocument) {
  const std::string shared = LMT_SHARED_DATA;
  const std::string corpus = shared + "/corpora/medium_prose.jsonl", gpt2 = shared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(corpus) || !std::filesystem::exists(gpt2 + "/encoder.json"))
    GTEST_SKIP() << "shared test data not found under " << shared << " (see ../shared/data/README.md)";
  auto tok = load_tokenizer(gpt2);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ASSERT_EQ((*tok)->eos_id(), 50256);
  // The first 40 documents (about 1.5 MB) plus tinyshakespeare as a plain-text document.
  std::ifstream in(corpus);
  std::string line, jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 40 && std::getline(in, line); ++i) {
    jsonl += line + "\n";
    texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  }
  write_bytes(path("prose.jsonl"), jsonl);
  std::filesystem::copy_file(shared + "/corpora/tinyshakespeare.txt", path("shakespeare.txt"));
  texts.push_back(read_bytes(path("shakespeare.txt")));
  PrepareOptions o = options({"prose.jsonl", "shakespeare.txt"}, "out");
  o.val_fraction = 0.1;
  o.tokenizer_path = gpt2;
  auto r = prepare_dataset(o, **tok);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->manifest.token_bytes, 2u);  // 50257 ids fit uint16
  std::vector<int32_t> train, val;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = (*tok)->encode(texts[i]);
    ids.push_back(50256);
    auto& dst = is_val_document(0, static_cast<int64_t>(i), 0.1) ? val : train;
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(read_split(path("out"), "train"), train);
  ASSERT_FALSE(val.empty()) << "the hash should send some of 41 documents to val";
  EXPECT_EQ(read_split(path("out"), "val"), val);
  EXPECT_EQ(r->manifest.tokenizer_fingerprint, (*tok)->fingerprint());
}

}  // namespace
}  // namespace lmt::data
