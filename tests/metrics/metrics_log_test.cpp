// MetricsLog (metrics/metrics_log.h): every record typed and stamped with Unix seconds; an untyped
// record is refused and nothing is written; on resume, step records after the checkpoint are
// dropped while headers (no "step") stay.
#include "lmt/metrics/metrics_log.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "common/files.h"

namespace lmt::metrics {
namespace {

std::vector<nlohmann::json> lines_of(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(test::read_bytes(path));
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

class MetricsLogTest : public test::ScratchDirTest {};

TEST_F(MetricsLogTest, RecordsAreStampedWithUnixSecondsAndMustHaveAType) {
  const std::string path = this->path("metrics.jsonl");
  {
    auto log = MetricsLog::open(path);
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    const double before = unix_seconds_now();
    ASSERT_TRUE(log->write({{"type", "step"}, {"step", 1}, {"loss", 2.5}}).ok());
    const double after = unix_seconds_now();
    ASSERT_TRUE(log->write({{"type", "event"}, {"event", "x"}, {"time", 12.5}}).ok());  // a given time is kept
    const Status untyped = log->write({{"step", 2}, {"loss", 2.0}});
    EXPECT_EQ(untyped.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(untyped.message().find(path), std::string::npos) << untyped.ToString();
    EXPECT_FALSE(log->write({{"type", 3}}).ok());
    const auto recs = lines_of(path);
    ASSERT_EQ(recs.size(), 2u);  // the refused records were not written
    EXPECT_GE(recs[0]["time"].get<double>(), before);
    EXPECT_LE(recs[0]["time"].get<double>(), after);
    EXPECT_GT(before, 1.7e9);  // seconds since 1970, not milliseconds or a monotonic clock
    EXPECT_LT(before, 1e10);
    EXPECT_EQ(recs[1]["time"], 12.5);
  }
  test::write_bytes(path, "{\"type\":\"header\",\"time\":1}\n{\"type\":\"step\",\"step\":1}\n{\"type\":\"step\",\"step\":2}\n"
                          "{\"type\":\"val\",\"step\":2}\n{\"type\":\"header\",\"time\":2,\"resumed_from_step\":1}\n");
  std::string repaired;
  auto log = MetricsLog::open(path, /*keep_through_step=*/1, &repaired);
  ASSERT_TRUE(log.ok());
  EXPECT_NE(repaired.find("dropped 2 records after step 1"), std::string::npos) << repaired;
  const auto recs = lines_of(path);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0]["type"], "header");
  EXPECT_EQ(recs[1]["step"], 1);
  EXPECT_EQ(recs[2]["resumed_from_step"], 1);
}

}  // namespace
}  // namespace lmt::metrics
