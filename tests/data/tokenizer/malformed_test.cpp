// Malformed and unsupported tokenizer files: each gives a Status that names the file (and the line,
// key or feature), never a crash. Also the small built-in tokenizers used by the mutation test.
#include <gtest/gtest.h>

#include "lmt/data/tokenizer/loaders.h"
#include "small_tokenizers.h"
#include "tokenizer_test_util.h"

namespace lmt::data {
namespace {

using testing::small_byte_level_json;
using testing::small_sentencepiece_json;

class MalformedTest : public testing::ScratchDir {
 protected:
  // Loads `bytes` written as `name`; expects failure with `code` and every `needles` in the message.
  void expect_error(const std::string& name, const std::string& bytes, StatusCode code,
                    std::initializer_list<std::string> needles, const std::string& encoding = "") {
    const std::string p = write(name, bytes);
    auto t = load_tokenizer(p, encoding);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), code) << t.status().ToString();
    EXPECT_NE(t.status().message().find(name), std::string::npos) << t.status().ToString();
    for (const std::string& n : needles) EXPECT_NE(t.status().ToString().find(n), std::string::npos) << t.status().ToString();
  }
};

TEST_F(MalformedTest, SmallTokenizersLoadAndRoundTrip) {
  auto bl = parse_hf_tokenizer_json(small_byte_level_json().dump(), "small.json");
  ASSERT_TRUE(bl.ok()) << bl.status().ToString();
  const std::vector<int32_t> ids = (*bl)->encode("the thing");
  EXPECT_EQ((*bl)->decode(ids), "the thing");
  EXPECT_EQ(ids.size(), 4u);  // "the", " ", "th", "ing"
  EXPECT_EQ((*bl)->eos_id(), (*bl)->token_id("<|endoftext|>"));

  auto sp = parse_hf_tokenizer_json(small_sentencepiece_json().dump(), "sp.json");
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  EXPECT_EQ((*sp)->encode("hello"), std::vector<int32_t>{*(*sp)->token_id("\u2581hello")});
  const std::vector<int32_t> fb = (*sp)->encode("hex\xff");  // x is not in the vocabulary: <0x78>
  EXPECT_EQ((*sp)->decode(fb), "hex\xff");
  EXPECT_EQ((*sp)->eos_id(), 2);
}

TEST_F(MalformedTest, MetaspacePreTokenizerSplitsBeforeEachMetaspace) {
  auto j = small_sentencepiece_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}};
  j["model"]["byte_fallback"] = false;  // unknown characters become <unk> (fused)
  auto t = parse_hf_tokenizer_json(j.dump(), "metaspace.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->pieces("hello  hello"), (std::vector<std::string>{"\u2581hello", "\u2581", "\u2581hello"}));
  const int32_t hello = *(*t)->token_id("\u2581hello"), meta = *(*t)->token_id("\u2581");
  EXPECT_EQ((*t)->encode("hello  hello"), (std::vector<int32_t>{hello, meta, hello}));
  EXPECT_EQ((*t)->decode((*t)->encode("hello  hello")), "hello  hello");
  EXPECT_EQ((*t)->encode("xyz"), (std::vector<int32_t>{meta, 0}));  // "▁" + one fused <unk>
}

TEST_F(MalformedTest, BadJson) {
  expect_error("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ", StatusCode::kDataLoss, {"malformed tokenizer.json"});
}

TEST_F(MalformedTest, MissingModel) {
  auto j = small_byte_level_json();
  j.erase("model");
  expect_error("tokenizer.json", j.dump(), StatusCode::kDataLoss, {"no \"model\""});
}

TEST_F(MalformedTest, UnknownModelTypeIsUnimplementedNamingIt) {
  auto j = small_byte_level_json();
  j["model"]["type"] = "Unigram";
  expect_error("tokenizer.json", j.dump(), StatusCode::kUnimplemented, {"model type 'Unigram'"});
}

TEST_F(MalformedTest, UnsupportedComponentsAreNamed) {
  auto a = small_byte_level_json();
  a["normalizer"] = {{"type", "NFKC"}};
  expect_error("a.json", a.dump(), StatusCode::kUnimplemented, {"normalizer 'NFKC'"});
  auto b = small_byte_level_json();
  b["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error("b.json", b.dump(), StatusCode::kUnimplemented, {"pre-tokenizer 'Whitespace'"});
  auto c = small_sentencepiece_json();
  c["decoder"] = {{"type", "WordPiece"}};
  expect_error("c.json", c.dump(), StatusCode::kUnimplemented, {"decoder 'WordPiece'"});
  auto d = small_byte_level_json();
  d["model"]["dropout"] = 0.1;
  expect_error("d.json", d.dump(), StatusCode::kUnimplemented, {"BPE dropout"});
  auto e = small_byte_level_json();
  e["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  expect_error("e.json", e.dump(), StatusCode::kUnimplemented, {"behavior 'MergedWithPrevious'"});
}

TEST_F(MalformedTest, MergeOfUnknownTokens) {
  auto j = small_byte_level_json();
  j["model"]["merges"].push_back("zz qq");
  expect_error("tokenizer.json", j.dump(), StatusCode::kDataLoss, {"model.merges[6]", "missing from model.vocab"});
}

TEST_F(MalformedTest, WrongValueTypes) {
  auto j = small_byte_level_json();
  j["model"]["vocab"]["t"] = "not a number";
  expect_error("tokenizer.json", j.dump(), StatusCode::kDataLoss, {"model.vocab['t']"});
}

TEST_F(MalformedTest, TiktokenBadBase64NamesTheLine) {
  expect_error("cl100k_base.tiktoken", "IQ== 0\nIg== 1\n!!not-base64!! 2\n", StatusCode::kDataLoss,
               {"cl100k_base.tiktoken:3", "not valid base64"});
  expect_error("r50k_base.tiktoken", "IQ== 0\nIg== x\n", StatusCode::kDataLoss, {"r50k_base.tiktoken:2", "rank 'x'"});
  expect_error("p50k_base.tiktoken", "IQ== 0\nIQ== 1\n", StatusCode::kDataLoss, {"also have rank 0"});
  expect_error("o200k_base.tiktoken", "IQ==0\n", StatusCode::kDataLoss, {"o200k_base.tiktoken:1"});
}

TEST_F(MalformedTest, TiktokenNeedsItsEncoding) {
  expect_error("ranks.tiktoken", "IQ== 0\n", StatusCode::kInvalidArgument, {"--encoding", "cl100k_base"});
  expect_error("ranks.bin", "IQ== 0\n", StatusCode::kInvalidArgument, {"unknown tiktoken encoding 'nope'"}, "nope");
  // A rank file lacking byte tokens cannot encode arbitrary text.
  expect_error("cl100k_base.tiktoken", "IQ== 0\n", StatusCode::kInvalidArgument, {"no token for the byte"});
}

TEST_F(MalformedTest, Gpt2TruncatedVocabBpe) {
  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  enc["th"] = 256;
  enc["the"] = 257;
  enc["<|endoftext|>"] = 258;
  std::filesystem::create_directories(path("gpt2"));
  write("gpt2/encoder.json", enc.dump());
  write("gpt2/vocab.bpe", "#version: 0.2\nt h\nth e\n");
  auto ok = load_tokenizer(path("gpt2"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->encode("the"), std::vector<int32_t>{257});
  EXPECT_EQ((*ok)->eos_id(), 258);

  write("gpt2/vocab.bpe", "#version: 0.2\nt h\n");  // lost its last merge
  auto cut = load_tokenizer(path("gpt2"));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("vocab.bpe"), std::string::npos) << cut.status().ToString();
  EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().ToString();

  write("gpt2/vocab.bpe", "#version: 0.2\nt h\nth\n");  // cut inside a line
  auto mid = load_tokenizer(path("gpt2"));
  ASSERT_FALSE(mid.ok());
  EXPECT_NE(mid.status().message().find("vocab.bpe:3"), std::string::npos) << mid.status().ToString();

  write("gpt2/encoder.json", enc.dump().substr(0, 100));
  auto bad = load_tokenizer(path("gpt2"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("encoder.json"), std::string::npos) << bad.status().ToString();
}

// Found by tests/fuzz/tiktoken_fuzz: a rank file of two lines, one with a rank near 2^30, made the
// loader allocate one slot per rank up to it (6 GB, then out of memory). Every loader bounds its ids
// by the number of tokens the file defines (token_id_bound) and names the offending entry.
TEST_F(MalformedTest, IdsFarBeyondTheTokenCountAreRefused) {
  expect_error("r50k_base.tiktoken", "IQ== 0\nIg== 162222222\n", StatusCode::kDataLoss,
               {"r50k_base.tiktoken:2", "rank 162222222", "hint:"});
  EXPECT_EQ(token_id_bound(50000), 101024);
  EXPECT_EQ(token_id_bound(size_t{1} << 40), int64_t{1} << 30);

  auto vocab = small_byte_level_json();
  vocab["model"]["vocab"]["zz"] = 100000000;
  expect_error("vocab_id.json", vocab.dump(), StatusCode::kDataLoss, {"model.vocab['zz']", "hint:"});

  auto added = small_byte_level_json();
  added["added_tokens"].push_back({{"id", 999999999}, {"content", "<x>"}, {"special", true}});
  expect_error("added_id.json", added.dump(), StatusCode::kDataLoss, {"added token '<x>'", "999999999"});

  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  enc["<|endoftext|>"] = 500000000;
  std::filesystem::create_directories(path("gpt2"));
  write("gpt2/encoder.json", enc.dump());
  write("gpt2/vocab.bpe", "#version: 0.2\n");
  auto t = load_tokenizer(path("gpt2"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(t.status().message().find("encoder.json: the id of '<|endoftext|>'"), std::string::npos) << t.status().ToString();
}

TEST_F(MalformedTest, PathsThatAreNotTokenizers) {
  auto missing = load_tokenizer(path("nope.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto empty_dir = load_tokenizer(dir_.string());
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_EQ(empty_dir.status().code(), StatusCode::kNotFound);
  expect_error("notes.txt", "hello", StatusCode::kInvalidArgument, {"not a recognised tokenizer file", "hint:"});
  expect_error("t.json", small_byte_level_json().dump(), StatusCode::kInvalidArgument, {"--encoding"}, "cl100k_base");
}

}  // namespace
}  // namespace lmt::data
