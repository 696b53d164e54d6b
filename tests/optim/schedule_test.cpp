// Learning-rate schedules at chosen steps (warmup ends, cosine midpoint, WSD decay start and end,
// multistep drops), their monotonicity, and the batch-size warmup's accumulation ramp.
#include "lmt/optim/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lmt::optim {
namespace {

ScheduleConfig schedule(const std::string& kind, int64_t warmup) {
  ScheduleConfig c;
  c.kind = kind;
  c.warmup_steps = warmup;
  return c;
}

TEST(Schedule, WarmupIsLinearAndReachesThePeak) {
  for (const char* kind : {"cosine", "wsd", "constant"}) {
    const ScheduleConfig c = schedule(kind, 4);
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 1, 100), 0.25) << kind;
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 2, 100), 0.5) << kind;
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 3, 100), 0.75) << kind;
    EXPECT_DOUBLE_EQ(lr_multiplier(c, 4, 100), 1.0) << kind;
  }
  EXPECT_DOUBLE_EQ(lr_multiplier(schedule("constant", 0), 1, 10), 1.0);  // no warmup: step 1 is peak
  EXPECT_DOUBLE_EQ(lr_multiplier(schedule("constant", 4), 1000, 100), 1.0);
}

TEST(Schedule, CosineEndpointsAndMidpoint) {
  ScheduleConfig c = schedule("cosine", 10);
  c.min_ratio = 0.1f;
  const double floor = 0.1f;  // the float the config holds
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 10, 110), 1.0);
  EXPECT_NEAR(lr_multiplier(c, 60, 110), floor + (1 - floor) * 0.5, 1e-12);                         // p = 1/2
  EXPECT_NEAR(lr_multiplier(c, 35, 110), floor + (1 - floor) * 0.5 * (1 + std::sqrt(0.5)), 1e-12);  // p = 1/4
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 110, 110), floor);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 500, 110), floor);  // past the end: the floor
  c.min_ratio = 0;
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 110, 110), 0.0);
  // A run no longer than its warmup stays in warmup.
  EXPECT_DOUBLE_EQ(lr_multiplier(schedule("cosine", 10), 5, 5), 0.5);
}

TEST(Schedule, WsdHoldsThenDecaysLinearlyOverTheFinalFraction) {
  ScheduleConfig c = schedule("wsd", 10);
  c.decay_fraction = 0.2f;  // the last round(0.2·100) = 20 steps: 81..100
  c.min_ratio = 0.0f;
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 11, 100), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 80, 100), 1.0);  // decay starts after step 80
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 81, 100), 0.95);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 90, 100), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 100, 100), 0.0);
  c.min_ratio = 0.1f;
  const double floor = 0.1f;
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 90, 100), 1 - (1 - floor) * 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 100, 100), floor);
}

TEST(Schedule, MultistepDropsAfterEachFraction) {
  ScheduleConfig c = schedule("multistep", 0);
  c.drops = {0.5f, 0.75f};
  c.gamma = 0.1f;
  const double g = 0.1f;
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 1, 100), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 50, 100), 1.0);  // as MultiStepLR: the first 50 steps at peak
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 51, 100), g);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 75, 100), g);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 76, 100), g * g);
  EXPECT_DOUBLE_EQ(lr_multiplier(c, 100, 100), g * g);
}

TEST(Schedule, MonotoneWhereItShouldBeAndWithinUnitRange) {
  ScheduleConfig multi = schedule("multistep", 7);
  multi.drops = {0.3f, 0.6f, 0.9f};
  for (ScheduleConfig c : {schedule("cosine", 7), schedule("wsd", 7), multi, schedule("constant", 7)}) {
    const int64_t total = 97;
    double prev = 0;
    for (int64_t s = 1; s <= total; ++s) {
      const double m = lr_multiplier(c, s, total);
      ASSERT_GE(m, 0.0) << c.kind << " step " << s;
      ASSERT_LE(m, 1.0) << c.kind << " step " << s;
      if (s <= c.warmup_steps)
        ASSERT_GT(m, prev) << c.kind << " warmup step " << s;
      else
        ASSERT_LE(m, prev) << c.kind << " step " << s;
      prev = m;
    }
  }
}

TEST(Schedule, ValidationNamesTheKey) {
  auto check = [](ScheduleConfig c, const std::string& want) {
    const Status s = validate(c);
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
    EXPECT_FALSE(s.hint().empty());
  };
  EXPECT_TRUE(validate(ScheduleConfig()).ok());
  const Status kind = validate(schedule("linear", 0));
  EXPECT_EQ(kind.message(), "schedule.kind = 'linear' is not a schedule");
  EXPECT_EQ(kind.hint(), "valid kinds: cosine, wsd, multistep, constant");
  check(schedule("cosine", -1), "schedule.warmup_steps = -1");
  ScheduleConfig c = schedule("cosine", 0);
  c.min_ratio = 1.5f;
  check(c, "schedule.min_ratio = 1.5 must be in [0, 1]");
  c = schedule("wsd", 0);
  c.decay_fraction = 0;
  check(c, "schedule.decay_fraction = 0");
  c = schedule("multistep", 0);
  check(c, "schedule.drops is empty");
  c.drops = {0.5f, 0.4f};
  check(c, "schedule.drops must increase");
  c.drops = {1.0f};
  check(c, "schedule.drops[0] = 1 must be in (0, 1)");
  c.drops = {0.5f};
  c.gamma = 0;
  check(c, "schedule.gamma = 0");
}

TEST(Accumulation, RampsLinearlyToTheTarget) {
  EXPECT_EQ(accumulation_steps(8, 1000, 0), 1);
  EXPECT_EQ(accumulation_steps(8, 1000, 142), 1);  // 7·142/1000 = 0.99
  EXPECT_EQ(accumulation_steps(8, 1000, 143), 2);  // 7·143/1000 = 1.001
  EXPECT_EQ(accumulation_steps(8, 1000, 500), 4);
  EXPECT_EQ(accumulation_steps(8, 1000, 999), 7);
  EXPECT_EQ(accumulation_steps(8, 1000, 1000), 8);
  EXPECT_EQ(accumulation_steps(8, 1000, 1'000'000), 8);
  EXPECT_EQ(accumulation_steps(8, 0, 0), 8);  // no ramp
  EXPECT_EQ(accumulation_steps(1, 1000, 10), 1);
  // Long runs: (target − 1)·tokens overflows int64 without the wide product.
  EXPECT_EQ(accumulation_steps(1'000'001, 2'000'000'000'000'000, 1'000'000'000'000'000), 500'001);
  int64_t prev = 1;
  for (int64_t t = 0; t <= 1200; t += 7) {
    const int64_t a = accumulation_steps(16, 1000, t);
    ASSERT_GE(a, prev);
    ASSERT_GE(a, 1);
    ASSERT_LE(a, 16);
    prev = a;
  }
}

}  // namespace
}  // namespace lmt::optim
