// Input limits (base/limits.h) and the number formatting for people (base/format.h).
#include "lmt/base/limits.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lmt/base/format.h"

namespace lmt {
namespace {

// Sets OMP_NUM_THREADS for one test and restores it afterwards.
class OmpEnv {
 public:
  explicit OmpEnv(const char* value) {
    if (const char* old = std::getenv("OMP_NUM_THREADS")) old_ = old, had_ = true;
    if (value) ::setenv("OMP_NUM_THREADS", value, 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }
  ~OmpEnv() {
    if (had_) ::setenv("OMP_NUM_THREADS", old_.c_str(), 1);
    else ::unsetenv("OMP_NUM_THREADS");
  }

 private:
  std::string old_;
  bool had_ = false;
};

TEST(Limits, ThreadLimitIsFourTimesTheHardwareWithinSixtyFourAnd1024) {
  const int64_t limit = max_threads();
  EXPECT_GE(limit, 64);
  EXPECT_LE(limit, 1024);
  EXPECT_EQ(limit, std::clamp<int64_t>(4 * hardware_threads(), 64, 1024));
}

TEST(Limits, ThreadCountsOutsideTheLimitNameTheFlag) {
  EXPECT_TRUE(check_thread_count(0, "--threads").ok());  // the default
  EXPECT_TRUE(check_thread_count(max_threads(), "--threads").ok());
  Status big = check_thread_count(100000, "--threads");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("--threads 100000 is out of range"), std::string::npos) << big.ToString();
  EXPECT_NE(big.hint().find("hardware threads"), std::string::npos) << big.ToString();
  EXPECT_FALSE(check_thread_count(-1, "--workers").ok());
  EXPECT_FALSE(check_thread_count(0, "--threads", /*min=*/1).ok());
}

TEST(Limits, OmpNumThreadsIsCheckedEntryByEntry) {
  {
    OmpEnv env(nullptr);
    EXPECT_TRUE(check_omp_num_threads().ok());
  }
  {
    OmpEnv env("2");
    EXPECT_TRUE(check_omp_num_threads().ok());
  }
  {
    OmpEnv env("2,1");  // nested levels
    EXPECT_TRUE(check_omp_num_threads().ok());
  }
  for (const char* bad : {"70000", "0", "-3", "abc", "4,", "2,99999", "99999999999999999999"}) {
    OmpEnv env(bad);
    Status s = check_omp_num_threads();
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find(std::string("OMP_NUM_THREADS=") + bad), std::string::npos) << s.ToString();
    EXPECT_FALSE(s.hint().empty());
  }
}

TEST(Limits, MemoryBeyondTheMachineIsRefusedWithBothSizes) {
  EXPECT_GT(usable_memory_bytes(), 0);
  EXPECT_TRUE(check_fits_in_memory(1 << 20, "a small buffer", "").ok());
  Status s = check_fits_in_memory(1e18, "training (train.micro_batch = 100000000)", "lower train.micro_batch");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("training (train.micro_batch = 100000000) needs"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("GiB"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.hint(), "lower train.micro_batch");
  EXPECT_FALSE(check_fits_in_memory(std::numeric_limits<double>::infinity(), "x", "").ok());
  EXPECT_FALSE(check_fits_in_memory(std::nan(""), "x", "").ok());
}

TEST(Format, DurationsNeverOverflow) {
  EXPECT_EQ(duration_text(0), "0s");
  EXPECT_EQ(duration_text(59.4), "59s");
  EXPECT_EQ(duration_text(65), "1m05s");
  EXPECT_EQ(duration_text(3 * 3600 + 4 * 60 + 10), "3h04m");
  EXPECT_EQ(duration_text(12 * 86400 + 3 * 3600), "12d03h");
  // max_steps = 1e12 at 0.1 s a step once printed "ETA -35791394m-8s".
  EXPECT_EQ(duration_text(1e11), "over 100 years");
  EXPECT_EQ(duration_text(1e300), "over 100 years");
  EXPECT_EQ(duration_text(-1), "?");
  EXPECT_EQ(duration_text(std::nan("")), "?");
}

TEST(Format, PerplexityHasFourSignificantDigitsOrInf) {
  EXPECT_EQ(perplexity_text(0), "1");
  EXPECT_EQ(perplexity_text(std::log(12.3456)), "12.35");
  EXPECT_EQ(perplexity_text(20), "4.852e+08");
  EXPECT_EQ(perplexity_text(700), "1.014e+304");  // once printed with 300 digits
  EXPECT_EQ(perplexity_text(800), "inf");
  EXPECT_EQ(perplexity_text(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(perplexity_text(std::nan("")), "nan");
}

}  // namespace
}  // namespace lmt
