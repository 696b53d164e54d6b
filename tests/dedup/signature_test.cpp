// Shingles, signatures, Jaccard and the (bands, rows) choice of lmt::dedup (minhash.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "dedup/planted_corpus.h"
#include "lmt/base/rng.h"
#include "lmt/dedup/minhash.h"

namespace lmt::dedup {
namespace {

using testing::TokenSource;
using testing::planted_pair;

// 0.5*FP + 0.5*FN of the S-curve, by Simpson's rule on 20000 intervals: an integrator independent of
// the midpoint rule choose_bands_rows uses.
double lsh_error(double t, int64_t b, int64_t r) {
  auto simpson = [](auto f, double lo, double hi) {
    const int n = 20000;
    const double h = (hi - lo) / n;
    double s = f(lo) + f(hi);
    for (int i = 1; i < n; ++i) s += f(lo + i * h) * (i % 2 == 1 ? 4 : 2);
    return s * h / 3;
  };
  auto p = [&](double s) { return 1.0 - std::pow(1.0 - std::pow(s, r), b); };
  return 0.5 * simpson(p, 0.0, t) + 0.5 * simpson([&](double s) { return 1.0 - p(s); }, t, 1.0);
}

TEST(ChooseBandsRows, MatchesDatasketchRuleRestrictedToExactProducts) {
  // Expected values: datasketch's _optimal_param (its fallback midpoint integrator, weights 0.5/0.5)
  // with the search restricted to b*r == num_hashes. (Unrestricted, datasketch gives (9, 12) for
  // 0.8/112, (12, 9) for 0.7/112 and (25, 5) for 0.5/128.) FineWeb's 14 x 8 is the choice for 0.7.
  EXPECT_EQ(choose_bands_rows(0.8, 112), std::make_pair(int64_t{8}, int64_t{14}));
  EXPECT_EQ(choose_bands_rows(0.7, 112), std::make_pair(int64_t{14}, int64_t{8}));
  EXPECT_EQ(choose_bands_rows(0.5, 128), std::make_pair(int64_t{32}, int64_t{4}));
  EXPECT_EQ(choose_bands_rows(0.9, 120), std::make_pair(int64_t{5}, int64_t{24}));
  // A prime number of hashes has two candidates only.
  EXPECT_EQ(choose_bands_rows(0.95, 7), std::make_pair(int64_t{1}, int64_t{7}));
  EXPECT_EQ(choose_bands_rows(0.05, 7), std::make_pair(int64_t{7}, int64_t{1}));
}

TEST(ChooseBandsRows, IsTheArgminOfTheErrorUnderAnIndependentIntegrator) {
  for (double t : {0.3, 0.5, 0.6, 0.75, 0.8, 0.85, 0.95}) {
    for (int64_t n : {64, 112, 128, 200, 256}) {
      const auto [b, r] = choose_bands_rows(t, n);
      ASSERT_EQ(b * r, n);
      const double chosen = lsh_error(t, b, r);
      for (int64_t bb = 1; bb <= n; ++bb) {
        if (n % bb != 0) continue;
        // 1e-5: the midpoint rule's own error at step 0.001, far below the gaps between divisors.
        EXPECT_LE(chosen, lsh_error(t, bb, n / bb) + 1e-5) << "t=" << t << " n=" << n << " chose " << b << "x" << r
                                                             << " but " << bb << "x" << n / bb << " is better";
      }
    }
  }
}

TEST(Signature, DeterministicSizedAndSeeded) {
  MinHashOptions o;
  const std::string text = "the quick brown fox jumps over the lazy dog and runs far away from home";
  const std::vector<uint64_t> sig = minhash_signature(text, o);
  ASSERT_EQ(sig.size(), 112u);
  EXPECT_EQ(sig, minhash_signature(text, o));
  for (uint64_t v : sig) EXPECT_LT(v, (uint64_t{1} << 61) - 1);  // values mod the Mersenne prime
  // Same shingle set, different whitespace: same signature.
  EXPECT_EQ(sig, minhash_signature("  the quick\tbrown fox\njumps over the lazy dog and runs far away from home\r\n", o));
  MinHashOptions other = o;
  other.seed = 2;
  const std::vector<uint64_t> sig2 = minhash_signature(text, other);
  int64_t equal = 0;
  for (size_t i = 0; i < sig.size(); ++i) equal += sig[i] == sig2[i];
  EXPECT_LE(equal, 2) << "a different seed gives different permutations";
  // Threads: pure function.
  std::vector<std::vector<uint64_t>> per_thread(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { per_thread[t] = minhash_signature(text, o); });
  for (auto& th : threads) th.join();
  for (const auto& s : per_thread) EXPECT_EQ(s, sig);
}

TEST(Signature, IsTheElementwiseMinimumOverShingles) {
  MinHashOptions o;
  // "p q r s t u" has the two shingles "p q r s t" and "q r s t u"; each 5-word text is one shingle.
  const auto whole = minhash_signature("p q r s t u", o);
  const auto s1 = minhash_signature("p q r s t", o);
  const auto s2 = minhash_signature("q r s t u", o);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i], std::min(s1[i], s2[i])) << i;
  // Repeating a shingle does not change the set.
  EXPECT_EQ(minhash_signature("p q r s t p q r s t", o).size(), 112u);
  EXPECT_EQ(shingle_hashes("a b c d e a b c d e a b c d e", o).size(), 5u);  // abcde bcdea cdeab deabc eabcd
}

TEST(Shingles, ShortTextsWordsAndCodePoints) {
  MinHashOptions o;
  EXPECT_EQ(shingle_hashes("a b", o).size(), 1u);  // fewer than 5 words: one shingle of the text
  EXPECT_EQ(shingle_hashes("a b", o), shingle_hashes(" a  b ", o));
  EXPECT_NE(shingle_hashes("a b", o), shingle_hashes("a c", o));
  EXPECT_EQ(shingle_hashes("", o).size(), 1u);
  EXPECT_EQ(shingle_hashes("one two three four five six seven", o).size(), 3u);
  MinHashOptions c;
  c.unit = ShingleUnit::kChar;
  c.ngram = 2;
  // "héllo": code points h é l l o -> "hé" "él" "ll" "lo" (bytes would give 5 bigrams).
  EXPECT_EQ(shingle_hashes("h\xc3\xa9llo", c).size(), 4u);
  EXPECT_EQ(shingle_jaccard("h\xc3\xa9llo", "h\xc3\xa9llo", c), 1.0);
  // "abcd" vs "abce": {ab, bc, cd} vs {ab, bc, ce}: 2 / 4.
  EXPECT_DOUBLE_EQ(shingle_jaccard("abcd", "abce", c), 0.5);
  // Character shingles keep whitespace.
  EXPECT_NE(shingle_hashes("a b", c), shingle_hashes("a  b", c));
}

TEST(Jaccard, PlantedPairsHaveExactlyTheConstructedSimilarity) {
  MinHashOptions o;
  TokenSource tokens;
  for (int64_t shared : {2, 20, 50, 80, 90, 100}) {
    const auto [a, b] = planted_pair(tokens, shared, 100);
    EXPECT_DOUBLE_EQ(shingle_jaccard(a, b, o), shared / 100.0) << shared;
  }
  const auto [a, b] = planted_pair(tokens, 6, 10);
  EXPECT_DOUBLE_EQ(shingle_jaccard(a, b, o), 0.6);
}

TEST(Jaccard, MinHashEstimateIsUnbiased) {
  // The fraction of equal signature values estimates J with variance J(1-J)/112.
  MinHashOptions o;
  TokenSource tokens;
  Rng rng(7);
  const int pairs = 400;
  double sum_err = 0, sum_abs = 0, sum_var = 0;
  for (int i = 0; i < pairs; ++i) {
    int64_t shared = 2 + 2 * static_cast<int64_t>(rng.below(50));  // 2..100, even: union 100 works
    const auto [a, b] = planted_pair(tokens, shared, 100);
    const double truth = shared / 100.0;
    const auto sa = minhash_signature(a, o), sb = minhash_signature(b, o);
    int64_t equal = 0;
    for (size_t k = 0; k < sa.size(); ++k) equal += sa[k] == sb[k];
    const double est = static_cast<double>(equal) / static_cast<double>(sa.size());
    sum_err += est - truth;
    sum_abs += std::abs(est - truth);
    sum_var += truth * (1 - truth) / static_cast<double>(sa.size());
  }
  const double bias = sum_err / pairs;
  const double sigma_of_mean = std::sqrt(sum_var) / pairs;
  EXPECT_LT(std::abs(bias), 4 * sigma_of_mean) << "bias " << bias << " sigma " << sigma_of_mean;
  // Mean |error| of an unbiased estimate with sd <= 0.047 is about 0.8 sd: well under 0.05.
  EXPECT_LT(sum_abs / pairs, 0.05);
}

TEST(Options, ValidateNamesTheField) {
  MinHashOptions o;
  EXPECT_TRUE(validate(o).ok());
  o.ngram = 0;
  EXPECT_NE(validate(o).message().find("ngram"), std::string::npos);
  o = {};
  o.rows = 0;
  EXPECT_EQ(validate(o).code(), StatusCode::kInvalidArgument);
  o = {};
  o.threshold = 1.5;
  EXPECT_NE(validate(o).message().find("threshold"), std::string::npos);
  o = {};
  o.memory_budget_bytes = 0;
  EXPECT_EQ(validate(o).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lmt::dedup
