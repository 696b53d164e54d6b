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

TEST(Rng, AdvanceEqualsThatManyDraws) {
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{63}, uint64_t{64}, uint64_t{1000},
                     uint64_t{123457}, uint64_t{1} << 20}) {
    Rng stepped(99), jumped(99);
    for (uint64_t i = 0; i < k; ++i) stepped.next_u64();
    jumped.advance(k);
    EXPECT_EQ(jumped.state(), stepped.state()) << "after " << k << " draws";
    EXPECT_EQ(jumped.next_u64(), stepped.next_u64());
  }
  // Jumps compose, and a jump far beyond what a loop could check agrees with two halves.
  Rng a(5), b(5);
  a.advance((uint64_t{1} << 40) + 12345);
  b.advance(uint64_t{1} << 40);
  b.advance(12345);
  EXPECT_EQ(a.state(), b.state());
}

}  // namespace
}  // namespace lmt
