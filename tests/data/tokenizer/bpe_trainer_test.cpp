// train_bpe end to end: hand-computed merges through the whole pipeline, determinism across thread
// counts, the tokenizer.json layout, special tokens, a trained tokenizer loaded back through
// load_tokenizer (round trip of the golden inputs), and errors for bad options and inputs.
#include "lmt/data/tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lmt/data/tokenizer/piece_counter.h"
#include "lmt/data/tokenizer/pretokenize.h"
#include "lmt/data/tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace lmt::data {
namespace {

using testing::ScratchDir;

// CorpusOptions without special tokens.
inline CorpusOptions corpus_options(std::vector<std::string> paths, std::string field, size_t block_bytes) {
  CorpusOptions o;
  o.paths = std::move(paths);
  o.text_field = std::move(field);
  o.block_bytes = block_bytes;
  return o;
}


std::string shakespeare_path() { return std::string(LMT_SHARED_DATA) + "/corpora/tinyshakespeare.txt"; }

#define LMT_SKIP_WITHOUT_SHAKESPEARE()                                                              \
  if (!std::filesystem::exists(shakespeare_path()))                                                 \
  GTEST_SKIP() << "shared corpus not found at " << shakespeare_path() << " (see ../shared/data/README.md)"

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

BpeTrainerOptions options_for(std::vector<std::string> inputs, int64_t vocab_size) {
  BpeTrainerOptions o;
  o.inputs = std::move(inputs);
  o.vocab_size = vocab_size;
  o.threads = 2;
  return o;
}

class BpeTrainerTest : public ScratchDir {
 protected:
  // Trains, writes tokenizer.json into the scratch dir and loads it back through load_tokenizer.
  std::unique_ptr<Tokenizer> train_and_load(const BpeTrainerOptions& o, TrainedBpe* trained = nullptr) {
    StatusOr<TrainedBpe> bpe = train_bpe(o);
    EXPECT_TRUE(bpe.ok()) << bpe.status().ToString();
    if (!bpe.ok()) return nullptr;
    const std::string path = write("tokenizer.json", bpe_tokenizer_json(*bpe));
    auto tok = load_tokenizer(path);
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    if (trained) *trained = *bpe;
    return tok.ok() ? std::move(tok).value() : nullptr;
  }
};

TEST_F(BpeTrainerTest, TinyCorpusGivesTheHandComputedMerges) {
  // One piece "aaabdaaabac" twice (the special token between them is cut out). Pair counts:
  // aa 4x2 (the run "aaa" holds two), then ties broken by bytes: ab < aa+a, ac < aaab+d, ...
  const std::string in = write("tiny.txt", "aaabdaaabac<|endoftext|>aaabdaaabac");
  StatusOr<TrainedBpe> bpe = train_bpe(options_for({in}, 1000));
  ASSERT_TRUE(bpe.ok()) << bpe.status().ToString();
  std::vector<std::string> merged;
  for (const LearnedMerge& m : bpe->merges) merged.push_back(bpe->tokens[m.left] + "+" + bpe->tokens[m.right]);
  EXPECT_EQ(merged, (std::vector<std::string>{"a+a", "a+b", "aa+ab", "a+c", "aaab+ac", "aaab+d", "aaabd+aaabac"}));
  EXPECT_EQ(bpe->merges[0].count, 8);
  EXPECT_EQ(bpe->stats.special_occurrences, 1);
  EXPECT_EQ(bpe->stats.distinct_pieces, 1);
  // The corpus runs out of pairs: 256 + 7 merges + 1 special, not 1000.
  EXPECT_EQ(bpe->vocab_size(), 264);
}

TEST_F(BpeTrainerTest, SameTokenizerJsonForOneAndTwoThreadsAndTwice) {
  LMT_SKIP_WITHOUT_SHAKESPEARE();
  BpeTrainerOptions o = options_for({shakespeare_path()}, 600);
  o.block_bytes = 64 << 10;
  o.threads = 1;
  auto one = train_bpe(o);
  o.threads = 2;
  auto two = train_bpe(o);
  auto again = train_bpe(o);
  ASSERT_TRUE(one.ok() && two.ok() && again.ok());
  const std::string json = bpe_tokenizer_json(*one);
  EXPECT_EQ(json, bpe_tokenizer_json(*two));
  EXPECT_EQ(json, bpe_tokenizer_json(*again));
  EXPECT_EQ(one->vocab_size(), 600);
}

TEST_F(BpeTrainerTest, PieceCountsDoNotDependOnWhereLongDocumentsAreCut) {
  LMT_SKIP_WITHOUT_SHAKESPEARE();
  std::string tricky = read_all(shakespeare_path()).substr(0, 200000);
  tricky += "x  \n\n  y\r\n\r\nz\t \n42 1234567\n\xc3\xa9t\xc3\xa9\n\xe0\xa4\x95\xe0\xa4\xbf\n  \n!!\n//\nEnd";
  const std::string in = write("tricky.txt", tricky);
  for (std::string_view pattern : {o200k_pattern(), cl100k_pattern()}) {
    auto pre = Pretokenizer::create(std::string(pattern));
    ASSERT_TRUE(pre.ok());
    auto count = [&](size_t block_bytes, int threads) {
      auto reader = CorpusReader::open(corpus_options({in}, "text", block_bytes));
      EXPECT_TRUE(reader.ok());
      auto counts = count_pieces(&*reader, *pre, {threads, {}}, {}, nullptr);
      EXPECT_TRUE(counts.ok());
      std::vector<std::pair<std::string, int64_t>> flat;
      for (const PieceCount& p : *counts) flat.emplace_back(p.bytes, p.count);
      return flat;
    };
    const auto whole = count(size_t{64} << 20, 1);
    EXPECT_GT(whole.size(), 1000u);
    EXPECT_EQ(count(512, 2), whole) << pattern;
    EXPECT_EQ(count(4096, 1), whole) << pattern;
  }
}

TEST_F(BpeTrainerTest, OutputIsAHuggingFaceByteLevelBpeTokenizerJson) {
  const std::string in = write("c.txt", "the cat sat on the mat; the cat ate the rat.\n");
  BpeTrainerOptions o = options_for({in}, 270);
  o.special_tokens = {"<|endoftext|>", "<|pad|>"};
  auto bpe = train_bpe(o);
  ASSERT_TRUE(bpe.ok()) << bpe.status().ToString();
  const nlohmann::json j = nlohmann::json::parse(bpe_tokenizer_json(*bpe));
  EXPECT_EQ(j["version"], "1.0");
  EXPECT_TRUE(j["normalizer"].is_null());
  ASSERT_EQ(j["added_tokens"].size(), 2u);
  EXPECT_EQ(j["added_tokens"][0], nlohmann::json::parse(R"({"id": 268, "content": "<|endoftext|>", "single_word": false,
      "lstrip": false, "rstrip": false, "normalized": false, "special": true})"));
  EXPECT_EQ(j["added_tokens"][1]["id"], 269);
  const nlohmann::json& pre = j["pre_tokenizer"];
  EXPECT_EQ(pre["type"], "Sequence");
  ASSERT_EQ(pre["pretokenizers"].size(), 2u);
  EXPECT_EQ(pre["pretokenizers"][0], nlohmann::json({{"type", "Split"},
                                                       {"pattern", {{"Regex", std::string(o200k_pattern())}}},
                                                       {"behavior", "Isolated"},
                                                       {"invert", false}}));
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  EXPECT_EQ(pre["pretokenizers"][1], byte_level);
  EXPECT_EQ(j["decoder"], byte_level);
  const nlohmann::json& m = j["model"];
  EXPECT_EQ(m["type"], "BPE");
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"}) EXPECT_TRUE(m[key].is_null()) << key;
  for (const char* key : {"fuse_unk", "byte_fallback", "ignore_merges"}) EXPECT_EQ(m[key], false) << key;
  ASSERT_EQ(m["vocab"].size(), 270u);
  EXPECT_EQ(m["vocab"]["!"], 33);    // id == byte value
  EXPECT_EQ(m["vocab"]["\xc4\xa0"], 32);  // "Ġ" is the byte-level character of ' '
  EXPECT_EQ(m["vocab"]["<|pad|>"], 269);
  ASSERT_EQ(m["merges"].size(), 12u);
  EXPECT_EQ(m["merges"][0], "a t");  // (a,t) occurs 6 times: cat x2, sat, mat, rat, ate
}

TEST_F(BpeTrainerTest, SpecialTokensAreSingleTokensThatNoMergeCrosses) {
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += "doc " + std::to_string(i) + " ends.<|endoftext|>";
  BpeTrainerOptions o = options_for({write("docs.txt", corpus)}, 400);
  o.special_tokens = {"<|endoftext|>", "<|im_start|>"};
  TrainedBpe bpe;
  auto tok = train_and_load(o, &bpe);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(bpe.stats.special_occurrences, 200);
  for (const std::string& t : bpe.tokens) {
    EXPECT_EQ(t.find("<|"), std::string::npos) << "token '" << t << "' spans into a special token";
    EXPECT_EQ(t.find("|>"), std::string::npos) << "token '" << t << "' spans out of a special token";
  }
  const int32_t eot = static_cast<int32_t>(bpe.tokens.size());
  EXPECT_EQ(tok->token_id("<|endoftext|>"), eot);
  EXPECT_EQ(tok->token_id("<|im_start|>"), eot + 1);
  EXPECT_EQ(tok->vocab_size(), bpe.vocab_size());
  const std::vector<int32_t> ids = {eot};
  EXPECT_EQ(tok->decode(ids), "<|endoftext|>");
}

TEST_F(BpeTrainerTest, SpecialTokensWithSpacesSurviveTheCutsOfLongDocuments) {
  // One long document and tiny blocks: the cut rule would split "<|doc end|>" at its space.
  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += "some words here<|doc end|>and more words\n";
  BpeTrainerOptions o = options_for({write("long.txt", corpus)}, 300);
  o.special_tokens = {"<|doc end|>"};
  for (size_t block = 16; block <= 64; ++block) {  // every alignment of cuts against the specials
    o.block_bytes = block;
    auto bpe = train_bpe(o);
    ASSERT_TRUE(bpe.ok()) << bpe.status().ToString();
    EXPECT_EQ(bpe->stats.special_occurrences, 300) << "block " << block;
    for (const std::string& t : bpe->tokens) EXPECT_EQ(t.find("doc"), std::string::npos) << t;
  }
}

TEST_F(BpeTrainerTest, TrainedTokenizerRoundTripsTheGoldenInputsAndCompressesShakespeare) {
  LMT_SKIP_WITHOUT_SHAKESPEARE();
  LMT_SKIP_WITHOUT_TOKENIZER_DATA();
  TrainedBpe bpe;
  auto tok = train_and_load(options_for({shakespeare_path()}, 1000), &bpe);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 1000);
  const std::vector<std::string> inputs = testing::golden_inputs();
  ASSERT_EQ(inputs.size(), 324u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(inputs[i]);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 1000) << "input " << i;
    ASSERT_EQ(tok->decode(ids), inputs[i]) << "input " << i;
  }
  const std::string text = read_all(shakespeare_path());
  const std::vector<int32_t> ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_LT(ids.size() * 2, text.size()) << "a 1000-token BPE should halve the byte count at least";
  std::printf("tinyshakespeare: %zu bytes -> %zu tokens (%.2f bytes/token)\n", text.size(), ids.size(),
              static_cast<double>(text.size()) / static_cast<double>(ids.size()));
}

TEST_F(BpeTrainerTest, BadOptionsAndInputsAreClearErrors) {
  const std::string in = write("ok.txt", "hello world");
  auto expect_error = [](const BpeTrainerOptions& o, StatusCode code, const std::string& needle) {
    auto r = train_bpe(o);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().ToString().find(needle), std::string::npos) << r.status().ToString();
  };
  expect_error(options_for({in}, 256), StatusCode::kInvalidArgument, "--vocab-size 256 is below 257");
  BpeTrainerOptions o = options_for({in}, 300);
  o.special_tokens = {"<|a|>", "<|a|>"};
  expect_error(o, StatusCode::kInvalidArgument, "given twice");
  o.special_tokens = {""};
  expect_error(o, StatusCode::kInvalidArgument, "empty");
  o.special_tokens = {"\xff"};
  expect_error(o, StatusCode::kInvalidArgument, "UTF-8");
  o.special_tokens = {"a"};  // the byte-level text of byte 'a'
  expect_error(o, StatusCode::kInvalidArgument, "same text");
  o = options_for({in}, 300);
  o.pattern = "(unclosed";
  expect_error(o, StatusCode::kInvalidArgument, "does not compile");
  expect_error(options_for({path("missing.txt")}, 300), StatusCode::kNotFound, "missing.txt");
  const std::string jsonl = write("d.jsonl", "{\"text\": \"a\"}\n{\"content\": \"b\"}\n");
  expect_error(options_for({jsonl}, 300), StatusCode::kInvalidArgument, jsonl + ":2: no field \"text\"");
}

}  // namespace
}  // namespace lmt::data
