// The S-curve test of issue #17: planted near-duplicate pairs at known Jaccard similarities; the
// detection rate of each level must match 1 - (1 - s^r)^b within binomial sampling error, and recall
// (of pairs at or above the threshold) and precision must match what the curve predicts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "common/files.h"
#include "dedup/planted_corpus.h"
#include "lmt/dedup/minhash.h"

namespace lmt::dedup {
namespace {

using testing::TokenSource;
using testing::planted_pair;

struct Level {
  double s;
  int64_t shared;  // of a union of 100 shingles
};
constexpr Level kLevels[] = {{0.9, 90}, {0.8, 80}, {0.5, 50}, {0.2, 20}};
constexpr int kPairsPerLevel = 500;

class SCurveTest : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    TokenSource tokens;
    // Interleave the levels so that every level is spread over the whole index range.
    for (int i = 0; i < kPairsPerLevel; ++i) {
      for (int l = 0; l < 4; ++l) {
        auto [a, b] = planted_pair(tokens, kLevels[l].shared, 100);
        texts_.push_back(std::move(a));
        texts_.push_back(std::move(b));
        level_.push_back(l);
      }
    }
  }

  DedupResult run(const MinHashOptions& o) {
    auto d = MinHashDeduper::create(o);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    for (size_t i = 0; i < texts_.size(); ++i) {
      Status s = (*d)->add(static_cast<int64_t>(i), minhash_signature(texts_[i], o));
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    auto r = (*d)->finish([&](int64_t doc) { return texts_[doc]; });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return *r;
  }

  // detected[l]: planted pairs of level l found (the second text removed for the first); also
  // checks that nothing else was removed (unrelated texts share no shingle).
  std::vector<int64_t> detected_per_level(const DedupResult& r) {
    std::vector<int64_t> detected(4, 0);
    for (size_t i = 0; i < r.removed.size(); ++i) {
      const int64_t doc = r.removed[i];
      EXPECT_EQ(doc % 2, 1) << "document " << doc << " removed, but it is the first of its pair";
      EXPECT_EQ(r.kept_for[i], doc - 1) << "document " << doc << " clustered with an unrelated document";
      ++detected[level_[doc / 2]];
    }
    return detected;
  }

  std::vector<std::string> texts_;
  std::vector<int> level_;  // per pair
};

TEST_F(SCurveTest, DetectionRateFollowsTheSCurveWithinSamplingError) {
  MinHashOptions o;  // FineWeb defaults: word 5-grams, 14 bands x 8 rows, threshold 0.8
  o.work_dir = dir_;
  o.workers = 2;
  const DedupResult r = run(o);
  const std::vector<int64_t> detected = detected_per_level(r);
  double expected_above = 0, expected_all = 0;
  std::printf("  s     P(s) theory  detected/%d\n", kPairsPerLevel);
  for (int l = 0; l < 4; ++l) {
    const double p = lsh_probability(kLevels[l].s, o.bands, o.rows);
    const double mean = kPairsPerLevel * p;
    const double sigma = std::sqrt(kPairsPerLevel * p * (1 - p));
    std::printf("  %.1f   %.4f       %lld\n", kLevels[l].s, p, static_cast<long long>(detected[l]));
    // 4 sigma, plus one count of slack where the binomial is nearly degenerate (p ~ 0 or 1).
    EXPECT_LE(std::abs(detected[l] - mean), 4 * sigma + 1)
        << "s=" << kLevels[l].s << ": " << detected[l] << " detected, theory " << mean << " +- " << sigma;
    if (kLevels[l].s >= o.threshold) expected_above += p;
    expected_all += p;
  }
  // Recall of the pairs at or above the threshold (0.9 and 0.8), and precision of what was found.
  const int64_t found_above = detected[0] + detected[1];
  const int64_t found_all = detected[0] + detected[1] + detected[2] + detected[3];
  const double recall = static_cast<double>(found_above) / (2 * kPairsPerLevel);
  const double recall_theory = expected_above / 2;
  const double recall_sigma = std::sqrt(recall_theory * (1 - recall_theory) / (2 * kPairsPerLevel));
  EXPECT_NEAR(recall, recall_theory, 4 * recall_sigma);
  const double precision = static_cast<double>(found_above) / static_cast<double>(found_all);
  const double precision_theory = expected_above / expected_all;
  // Precision's error is driven by the ~27 detections at s=0.5 (sd ~5): 4 sd of those ~ 0.02.
  EXPECT_NEAR(precision, precision_theory, 0.025);
  std::printf("  recall %.4f (theory %.4f)  precision %.4f (theory %.4f)\n", recall, recall_theory, precision,
              precision_theory);
  EXPECT_EQ(r.clusters, found_all);
  EXPECT_GE(r.candidate_pairs, found_all);
  EXPECT_EQ(r.verified_pairs, 0);
}

TEST_F(SCurveTest, VerificationDropsExactlyTheCandidatesBelowTheThreshold) {
  MinHashOptions o;
  o.work_dir = dir_;
  o.workers = 1;
  const DedupResult plain = run(o);
  o.verify = true;
  const DedupResult verified = run(o);
  const std::vector<int64_t> before = detected_per_level(plain);
  const std::vector<int64_t> after = detected_per_level(verified);
  EXPECT_EQ(after[0], before[0]);  // s = 0.9 >= 0.8: all kept
  EXPECT_EQ(after[1], before[1]);  // s = 0.8 exactly: kept (>=)
  EXPECT_EQ(after[2], 0);          // s = 0.5: every candidate rejected
  EXPECT_EQ(after[3], 0);
  EXPECT_GT(before[2], 0) << "the corpus should produce some false candidates at s=0.5 (expected ~27)";
  EXPECT_EQ(verified.rejected_pairs, before[2] + before[3]);
  EXPECT_EQ(verified.verified_pairs, before[0] + before[1]);
  EXPECT_EQ(verified.candidate_pairs, plain.candidate_pairs);  // collisions do not depend on verify
  // Precision 1 now: every removed document has J >= 0.8 with the one it was removed for.
  for (size_t i = 0; i < verified.removed.size(); ++i) {
    EXPECT_GE(shingle_jaccard(texts_[verified.removed[i]], texts_[verified.kept_for[i]], o), o.threshold);
  }
}

}  // namespace
}  // namespace lmt::dedup
