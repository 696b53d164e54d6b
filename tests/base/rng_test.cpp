#include "lmt/base/rng.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lmt {
namespace {

TEST(Rng, SameSeedSameSequenceAndStateRestores) {
  Rng a(42), b(42);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  Rng::State s = a.state();
  uint64_t x = a.next_u64();
  a.set_state(s);
  EXPECT_EQ(a.next_u64(), x);
}

TEST(Rng, NormalHasUnitMomentsAndBelowStaysInRange) {
  Rng r(7);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double v = r.normal();
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(r.below(17), 17u);
}

}  // namespace
}  // namespace lmt
