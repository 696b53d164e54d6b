#include "lmt/base/check.h"

#include <gtest/gtest.h>

namespace lmt {
namespace {

TEST(CheckDeathTest, FailureNamesFileLineExpressionAndMessage) {
  int n = 12, g = 5;
  EXPECT_DEATH(LMT_CHECK(n % g == 0) << "n=" << n << " g=" << g,
               "check_test.cpp:[0-9]+: check failed: n % g == 0 n=12 g=5");
}

TEST(CheckDeathTest, ComparisonShowsBothValues) {
  EXPECT_DEATH(LMT_CHECK_EQ(3, 4) << "ranks", "check failed: .*\\(3 vs 4\\) ranks");
}

TEST(Check, PassingCheckEvaluatesOnce) {
  int calls = 0;
  auto f = [&] { ++calls; return true; };
  LMT_CHECK(f()) << "never printed";
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace lmt
