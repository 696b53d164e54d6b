// Pretokenizer: pieces always cover the text exactly (any bytes, any pattern), the built-in patterns
// are tiktoken's, and \s means Unicode White_Space as in tiktoken's and HF's regex engines.
#include "lmt/data/tokenizer/pretokenize.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "tokenizer_test_util.h"

namespace lmt::data {
namespace {

std::vector<std::string> split(const Pretokenizer& p, std::string_view text) {
  std::vector<std::string_view> views;
  p.split(text, &views);
  return {views.begin(), views.end()};
}

std::string join(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}

Pretokenizer make(std::string_view pattern) {
  auto p = Pretokenizer::create(std::string(pattern));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

TEST(Pretokenize, BuiltInPatternsAreTiktokens) {
  LMT_SKIP_WITHOUT_TOKENIZER_DATA();
  std::ifstream in(testing::tokenizers_dir() + "/tiktoken/encodings.json");
  const auto enc = nlohmann::json::parse(in);
  EXPECT_EQ(enc["r50k_base"]["pat_str"].get<std::string>(), gpt2_pattern());
  EXPECT_EQ(enc["p50k_base"]["pat_str"].get<std::string>(), gpt2_pattern());
  EXPECT_EQ(enc["cl100k_base"]["pat_str"].get<std::string>(), cl100k_pattern());
  EXPECT_EQ(enc["o200k_base"]["pat_str"].get<std::string>(), o200k_pattern());
}

TEST(Pretokenize, Cl100kSplitsAsTiktokenDoes) {
  const Pretokenizer p = make(cl100k_pattern());
  EXPECT_EQ(split(p, "Hello world  \n\n x I'M 12345"),
            (std::vector<std::string>{"Hello", " world", "  \n\n", " x", " I", "'M", " ", "123", "45"}));
  EXPECT_TRUE(split(p, "").empty());
}

TEST(Pretokenize, WhiteSpaceIsUnicodeWhiteSpace) {
  const Pretokenizer p = make(R"(\s+|\S+)");
  // U+0085 and U+3000 are White_Space; U+180E (Mongolian vowel separator) and U+200B are not,
  // although PCRE2's own \s would take U+180E.
  EXPECT_EQ(split(p, "a\u0085b"), (std::vector<std::string>{"a", "\u0085", "b"}));
  EXPECT_EQ(split(p, "a\u3000b"), (std::vector<std::string>{"a", "\u3000", "b"}));
  EXPECT_EQ(split(p, "a\u180Eb"), (std::vector<std::string>{"a\u180Eb"}));
  EXPECT_EQ(split(p, "a\u200Bb"), (std::vector<std::string>{"a\u200Bb"}));
  // Inside a negated class too: [^\s\p{L}] takes U+180E as punctuation.
  const Pretokenizer q = make(R"([^\s\p{L}]+|\s+|\p{L}+)");
  EXPECT_EQ(split(q, "a\u180E b"), (std::vector<std::string>{"a", "\u180E", " ", "b"}));
}

TEST(Pretokenize, UnmatchedBytesBecomePiecesOfTheirOwn) {
  const Pretokenizer p = make(R"(\p{L}+)");
  EXPECT_EQ(split(p, "ab, cd!"), (std::vector<std::string>{"ab", ", ", "cd", "!"}));
  // Invalid UTF-8 never matches and never aborts the split.
  EXPECT_EQ(split(p, "ab\xff\xfe" "cd\xc3"), (std::vector<std::string>{"ab", "\xff\xfe", "cd", "\xc3"}));
}

TEST(Pretokenize, EmptyMatchesDoNotLoopOrLoseText) {
  const Pretokenizer p = make("x*");
  EXPECT_EQ(join(split(p, "abxxcx")), "abxxcx");
  EXPECT_EQ(split(p, "abxxcx"), (std::vector<std::string>{"ab", "xx", "c", "x"}));
}

TEST(Pretokenize, BadPatternIsAnErrorNamingTheOffset) {
  auto p = Pretokenizer::create("(ab|[c");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("offset"), std::string::npos) << p.status().message();
}

TEST(Pretokenize, RandomBytesAreCoveredExactlyByEveryPattern) {
  std::mt19937_64 rng(7);
  const Pretokenizer patterns[] = {make(gpt2_pattern()), make(cl100k_pattern()), make(o200k_pattern())};
  const std::string alphabet[] = {"a", "Z", " ", "\n", "\r", "'", "s", "1", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80",
                                  "\xff", "\x80", "\xe4\xb8", ".", "\t", "\u00a0", "\u3000"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    for (int k = rng() % 40; k > 0; --k) text += alphabet[rng() % std::size(alphabet)];
    for (const Pretokenizer& p : patterns) {
      const auto pieces = split(p, text);
      EXPECT_EQ(join(pieces), text);
      for (const auto& piece : pieces) EXPECT_FALSE(piece.empty());
    }
  }
}

TEST(Pretokenize, HugeRunsStayLinear) {
  const Pretokenizer p = make(cl100k_pattern());
  const std::string spaces(1 << 20, ' '), letters(1 << 20, 'a');
  EXPECT_EQ(join(split(p, spaces + "x")), spaces + "x");
  EXPECT_EQ(split(p, letters).size(), 1u);
}

TEST(Pretokenize, SplitIsThreadSafe) {
  const Pretokenizer p = make(o200k_pattern());
  const std::string text = "Some text, with 123 numbers and ünïcödé — and more.\n\n  Lines. ";
  const auto expected = split(p, text);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i)
        if (split(p, text) != expected) ++bad;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace lmt::data
