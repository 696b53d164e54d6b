// parse_log_level(): the four names LMT_LOG_LEVEL accepts, and nothing else (docs/CLI.md).
#include <gtest/gtest.h>

#include "lmt/base/log.h"
#include "lmt/base/status.h"

namespace lmt {
namespace {

TEST(LogLevel, ParsesExactlyTheFourNames) {
  LogLevel l = LogLevel::INFO;
  ASSERT_TRUE(parse_log_level("debug", &l));
  EXPECT_EQ(l, LogLevel::DEBUG);
  ASSERT_TRUE(parse_log_level("warning", &l));
  EXPECT_EQ(l, LogLevel::WARNING);
  ASSERT_TRUE(parse_log_level("error", &l));
  EXPECT_EQ(l, LogLevel::ERROR);
  ASSERT_TRUE(parse_log_level("info", &l));
  EXPECT_EQ(l, LogLevel::INFO);
  for (const char* bad : {"", "bogus", "DEBUG", "warn", "info ", "3"}) {
    LogLevel keep = LogLevel::ERROR;
    EXPECT_FALSE(parse_log_level(bad, &keep)) << "'" << bad << "'";
    EXPECT_EQ(keep, LogLevel::ERROR) << "a refused value must not change the level";
  }
  EXPECT_STREQ(log_level_names(), "debug, info, warning, error");
}

TEST(LogLevel, UsageErrorHasItsOwnCode) {
  const Status s = UsageError("--config is required", "e.g. --config configs/demo.toml");
  EXPECT_EQ(s.code(), StatusCode::kUsage);
  EXPECT_STREQ(StatusCodeName(s.code()), "usage error");
  EXPECT_EQ(s.ToString(), "error: --config is required\nhint: e.g. --config configs/demo.toml");
}

}  // namespace
}  // namespace lmt
