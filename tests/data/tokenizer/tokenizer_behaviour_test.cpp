// Behaviour of the real tokenizers beyond the goldens: special tokens, invalid UTF-8 and other
// hostile input, the long-piece merge path against tiktoken's definition, NFC, thread safety,
// fingerprints. Each tokenizer is loaded once per test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <map>
#include <random>
#include <thread>

#include "lmt/data/tokenizer/loaders.h"
#include "lmt/data/tokenizer/nfc.h"
#include "tokenizer_test_util.h"

namespace lmt::data {
namespace {

class TokenizerBehaviourTest : public ::testing::Test {
 protected:
  static const BpeTokenizer& tok(const std::string& rel) { return testing::shared_tokenizer(rel); }
  void SetUp() override {
    if (!testing::have_tokenizer_data()) GTEST_SKIP() << "shared test data not found at " << testing::tokenizers_dir();
  }
};

const char* kCl100k = "tiktoken/cl100k_base.tiktoken";
const char* kO200k = "tiktoken/o200k_base.tiktoken";
const char* kR50k = "tiktoken/r50k_base.tiktoken";
const char* kGpt2 = "gpt2";
const char* kQwen3 = "qwen3/tokenizer.json";
const char* kMistral = "mistral/tokenizer.json";

TEST_F(TokenizerBehaviourTest, TiktokenSpecialTokensByTokenId) {
  const BpeTokenizer& cl = tok(kCl100k);
  EXPECT_EQ(cl.token_id("<|endoftext|>"), 100257);
  EXPECT_EQ(cl.token_id("<|fim_prefix|>"), 100258);
  EXPECT_EQ(cl.token_id("<|fim_middle|>"), 100259);
  EXPECT_EQ(cl.token_id("<|fim_suffix|>"), 100260);
  EXPECT_EQ(cl.token_id("<|endofprompt|>"), 100276);
  EXPECT_EQ(cl.eos_id(), 100257);
  EXPECT_EQ(cl.vocab_size(), 100277);
  EXPECT_EQ(cl.token_id(" the"), 279);  // an ordinary token by its bytes
  EXPECT_EQ(cl.token_id("no such token, surely"), std::nullopt);
  EXPECT_EQ(tok(kO200k).token_id("<|endoftext|>"), 199999);
  EXPECT_EQ(tok(kO200k).token_id("<|endofprompt|>"), 200018);
  EXPECT_EQ(tok(kR50k).eos_id(), 50256);
  EXPECT_EQ(tok(kGpt2).eos_id(), 50256);
  EXPECT_EQ(tok(kGpt2).vocab_size(), 50257);
}

TEST_F(TokenizerBehaviourTest, SpecialTokenTextIsOrdinaryTextInEncode) {
  const BpeTokenizer& cl = tok(kCl100k);
  const std::vector<int32_t> plain = cl.encode("<|endoftext|>");
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(cl.decode(plain), "<|endoftext|>");
  EXPECT_EQ(cl.encode_with_special_tokens("a<|endoftext|>b"),
            (std::vector<int32_t>{cl.encode("a")[0], 100257, cl.encode("b")[0]}));
  EXPECT_EQ(cl.decode(std::vector<int32_t>{100257}), "<|endoftext|>");
}

TEST_F(TokenizerBehaviourTest, HfModelsEosAndVocabSize) {
  EXPECT_EQ(tok(kQwen3).eos_id(), 151643);
  EXPECT_EQ(tok(kQwen3).vocab_size(), 151669);
  EXPECT_EQ(tok(kQwen3).token_id("<think>"), 151667);
  EXPECT_EQ(tok(kMistral).eos_id(), 2);
  EXPECT_EQ(tok(kMistral).vocab_size(), 32000);
  EXPECT_EQ(tok(kMistral).token_id("\u2581the"), 272);
}

TEST_F(TokenizerBehaviourTest, InvalidUtf8RoundTripsAsBytes) {
  std::mt19937_64 rng(11);
  std::vector<std::string> inputs = {"\xff", "\xc3", "abc\xe4\xb8", "\xed\xa0\x80 surrogate", "\xc0\xaf overlong",
                                     "\xf4\x90\x80\x80 too big", std::string("nul\0byte", 8), "\x80\x80\x80"};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int k = rng() % 64; k > 0; --k) s += static_cast<char>(rng() & 0xFF);
    inputs.push_back(s);
  }
  for (const char* name : {kCl100k, kO200k, kGpt2, kQwen3, kMistral}) {
    const BpeTokenizer& t = tok(name);
    for (const std::string& s : inputs) {
      const auto ids = t.encode(s);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size()) << name;
      // Qwen3 normalises to NFC, which valid runs of random bytes may change; every other model
      // must give the bytes back exactly.
      EXPECT_EQ(t.decode(ids), std::string(name) == kQwen3 ? nfc_normalize(s) : s) << name;
    }
  }
}

TEST_F(TokenizerBehaviourTest, EdgeCasesRoundTrip) {
  const std::vector<std::string> inputs = {"", " ", "\n", std::string(100000, ' '), std::string(100000, 'a'),
                                           std::string(5000, '\n') + "x", "a" + std::string(3000, '!'),
                                           "\u2581 metaspace char", "tab\there"};
  for (const char* name : {kCl100k, kO200k, kGpt2, kQwen3}) {
    const BpeTokenizer& t = tok(name);
    for (const std::string& s : inputs) EXPECT_EQ(t.decode(t.encode(s)), s) << name << " len " << s.size();
  }
  // SentencePiece-style: U+2581 in the input decodes as a space (its decoder maps every ▁ to ' ').
  const BpeTokenizer& m = tok(kMistral);
  for (const std::string& s : inputs) {
    if (s.find("\u2581") != std::string::npos) continue;
    EXPECT_EQ(m.decode(m.encode(s)), s) << "mistral len " << s.size();
  }
}

// tiktoken's definition, written as plainly as possible: merge the adjacent pair whose
// concatenation has the lowest rank, leftmost first.
std::vector<int32_t> reference_bpe(const BpeTokenizer& t, const std::string& piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int best_rank = INT_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto r = t.token_id(parts[i] + parts[i + 1]);
      if (r && *r < best_rank) best_rank = *r, best = i;
    }
    if (best_rank == INT_MAX) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(*t.token_id(p));
  return ids;
}

TEST_F(TokenizerBehaviourTest, LongPiecesMergeAsTiktokenDefinesIt) {
  const BpeTokenizer& cl = tok(kCl100k);
  std::mt19937_64 rng(3);
  const std::string letters = "etaoinshrdlucmfw";
  for (int i = 0; i < 40; ++i) {  // single letter-run pieces of 100..400 bytes: both merge paths
    std::string piece;
    for (int k = 100 + rng() % 300; k > 0; --k) piece += letters[rng() % letters.size()];
    ASSERT_EQ(cl.pieces(piece).size(), 1u);
    EXPECT_EQ(cl.encode(piece), reference_bpe(cl, piece)) << piece;
  }
}

TEST_F(TokenizerBehaviourTest, Qwen3NormalisesToNfc) {
  const BpeTokenizer& q = tok(kQwen3);
  EXPECT_EQ(q.encode("caf\u0065\u0301"), q.encode("caf\u00e9"));
  EXPECT_EQ(q.decode(q.encode("caf\u0065\u0301")), "caf\u00e9");
}

TEST_F(TokenizerBehaviourTest, EncodeMatchesSpecialAwareEncodeWithoutAddedTokens) {
  const BpeTokenizer& q = tok(kQwen3);
  for (const std::string s : {"Hello world", "<think> is plain here", "a <|im_start|> b"}) {
    const bool has_added = s.find('<') != std::string::npos;
    EXPECT_EQ(q.encode(s) == q.encode_with_special_tokens(s), !has_added) << s;
  }
  EXPECT_EQ(q.encode_with_special_tokens("<think>"), std::vector<int32_t>{151667});
}

TEST_F(TokenizerBehaviourTest, UnknownIdsDecodeToNothing) {
  const BpeTokenizer& cl = tok(kCl100k);
  EXPECT_EQ(cl.decode(std::vector<int32_t>{-1, 100256, 100261, 1 << 30, 9906}), "Hello");
}

TEST_F(TokenizerBehaviourTest, ConcurrentEncodesAgree) {
  const BpeTokenizer& cl = tok(kCl100k);
  const std::vector<std::string> texts = testing::golden_inputs();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& s : texts) expected.push_back(cl.encode(s));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < texts.size() * 3; i += 4)
        if (cl.encode(texts[i % texts.size()]) != expected[i % texts.size()]) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(TokenizerBehaviourTest, FingerprintsAreStableAndDistinct) {
  const std::string a = tok(kCl100k).fingerprint();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto again = load_tokenizer(testing::tokenizers_dir() + "/" + kCl100k);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint(), a);
  EXPECT_NE(tok(kO200k).fingerprint(), a);
  EXPECT_NE(tok(kR50k).fingerprint(), tok("tiktoken/p50k_base.tiktoken").fingerprint());
}

// Dataset manifests name their tokenizer by fingerprint, so it must not change with the SHA-256
// implementation: these are the values `lmtrain data prepare` wrote into manifest.json before
// lmtrain used nettle (with its own hand-written SHA-256, commit 74b2d99).
TEST_F(TokenizerBehaviourTest, FingerprintsEqualTheOnesInExistingManifests) {
  EXPECT_EQ(tok(kCl100k).fingerprint(), "7726a772d12cc4ab11f3ffd64a0850a6ca58e8b9a5e86af8ae9da1d56d17254c");
  EXPECT_EQ(tok(kGpt2).fingerprint(), "3708cfec98b7a5a07dd92691dd5a19196e6aa9014f77a4ea21058c658222656a");
  EXPECT_EQ(tok(kQwen3).fingerprint(),
            "f1717bab8d413488a647c0527fcf61c35952f1264ca54116e76da0619c6a4bb7");
  EXPECT_EQ(tok(kMistral).fingerprint(),
            "8040a577ffeba1d12f9fb0facb0f2064523e464f1ae8d3ffb98090900ab3c4d7");
}

}  // namespace
}  // namespace lmt::data
