// StallWatchdog (train/stall_watchdog.h): quiet while beats come, one report naming the last beat
// once they stop, quiet across a stop and continue (SIGSTOP, SIGCONT), a failed health check
// reported at once, and a prompt stop when destroyed. The trainer's wiring is in trainer_test
// (AStalledStepIsReported...) and device_dist_test (ABackgroundCommunicatorError...), and a hung
// rank ending a real mpirun job in dist_fault_test.
#include "lmt/train/stall_watchdog.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/stall_reports.h"

namespace lmt::train {
namespace {

using Clock = std::chrono::steady_clock;

TEST(StallWatchdog, BeatsKeepItQuiet) {
  test::StallReports r;
  {
    StallWatchdog dog(2.0, r.handler());
    const auto end = Clock::now() + std::chrono::milliseconds(500);
    for (int64_t k = 0; Clock::now() < end; ++k) {
      dog.beat("micro-batch", 1, k);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_EQ(r.count(), 0u);
}

TEST(StallWatchdog, ReportsOnceNamingTheLastBeatWhenBeatsStop) {
  test::StallReports r;
  const auto start = Clock::now();
  StallWatchdog dog(0.2, r.handler());
  dog.beat("micro-batch", 7, 2);
  while (r.count() == 0 && Clock::now() - start < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(r.count(), 1u) << "no report 30 s after the last beat";
  EXPECT_GE(waited, 0.19);  // not before the timeout
  const std::string report = r.got()[0];
  EXPECT_NE(report.find("no progress for "), std::string::npos) << report;
  EXPECT_NE(report.find("train.stall_timeout_s = 0.2"), std::string::npos) << report;
  EXPECT_NE(report.find("since micro-batch 2 began (step 7): "), std::string::npos) << report;
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // three timeouts more: still one report
  EXPECT_EQ(r.count(), 1u);
}

// A process stopped (SIGSTOP, as Ctrl-Z or a scheduler's suspend) for three timeouts and then
// continued is not hung (its watchdog thread wakes late and starts over). In a child process, with a
// 1 s timeout; the child exits 0 if no report came within 0.5 s after it was continued, 1 if one did.
TEST(StallWatchdog, AStoppedAndContinuedProcessIsNotReported) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<bool> reported{false};
    StallWatchdog dog(1.0, [&](const std::string&) { reported = true; });
    dog.beat("step", 1);
    raise(SIGSTOP);  // the parent continues it after 3 s
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the watchdog polls every 0.25 s
    std::_Exit(reported ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_EQ(kill(child, SIGCONT), 0);
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the watchdog reported a stall after SIGCONT";
}

// A communicator's background error (NCCL's) is reported at once, long before the timeout.
TEST(StallWatchdog, AFailedHealthCheckIsReportedAtOnce) {
  test::StallReports r;
  std::atomic<int> asked{0};
  const auto start = Clock::now();
  StallWatchdog dog(600.0, r.handler(), [&]() -> std::string { return ++asked < 3 ? "" : "NCCL: remote error"; });
  while (r.count() == 0 && Clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(r.count(), 1u) << "no report 60 s after the health check failed";
  EXPECT_EQ(r.got()[0], "NCCL: remote error");
  EXPECT_GE(asked.load(), 3);
}

TEST(StallWatchdog, DestroyingItStopsTheWatchAtOnce) {
  test::StallReports r;
  const auto start = Clock::now();
  { StallWatchdog dog(600.0, r.handler()); }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 60.0);  // not the 150 s poll
  EXPECT_EQ(r.count(), 0u);
}

}  // namespace
}  // namespace lmt::train
