// The OpenMP wait policy and `lmtrain bench train --contend` as a user runs them (issue #21, goal 3):
// the one restart that applies a policy (the chosen variables in effect, the user's own respected,
// no loop, exit codes and output passed through), and the busy-loop process gone after success,
// an error and a signal. No timing thresholds: only what the figures are and that they exist.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "common/files.h"
#include "common/lmtrain_cli.h"

namespace {

using lmt::test::CliResult;

// ctest sets OMP_WAIT_POLICY=passive for every test; these runs start from a clean OpenMP
// environment unless they set one.
const std::string kClean = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u LMT_OMP_ENV -u LMT_OMP_REEXEC -u LMT_WAIT_POLICY ";
const std::string kTinyBench = " bench train --preset tiny --micro-batch 1 --seq-len 16 --dtype fp32 --warmup 0 --iters 1 --json";

CliResult run_env(const std::string& env, const std::string& args, bool with_stderr = true) {
  const std::string cmd = kClean + env + " " + LMTRAIN_BIN + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  CliResult r;
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The last line of `out` that is a JSON object (the --json record; log lines are interleaved).
nlohmann::json last_json(const std::string& out) {
  std::istringstream in(out);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}



// The busy loop's pid from the "contend: busy-loop process PID on cpu N" line, or -1.
int busy_pid_in(const std::string& text) {
  const std::string key = "contend: busy-loop process ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + key.size());
}

TEST(WaitPolicyCli, AutoIsAppliedByOneRestartAndReported) {
  CliResult r = run_env("LMT_LOG_LEVEL=debug", kTinyBench);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(count(r.out, "restarting once"), 1u) << r.out;
  const nlohmann::json j = last_json(r.out);
  ASSERT_FALSE(j.is_null()) << r.out;
  EXPECT_EQ(count(r.out, "\"bench\":\"train\""), 1u);  // stdout passed through once
  EXPECT_EQ(j["omp"]["wait_policy"], "auto");
  EXPECT_EQ(j["omp"]["GOMP_SPINCOUNT"], "10000");
  EXPECT_EQ(j["omp"]["OMP_WAIT_POLICY"], "");
}

TEST(WaitPolicyCli, EnvAndFlagChooseThePolicyAndAFlagReplacesLmtrainsOwnVariables) {
  CliResult passive = run_env("LMT_WAIT_POLICY=passive", kTinyBench);
  ASSERT_EQ(passive.code, 0) << passive.out;
  EXPECT_EQ(last_json(passive.out)["omp"]["wait_policy"], "passive");
  EXPECT_EQ(last_json(passive.out)["omp"]["OMP_WAIT_POLICY"], "passive");
  // auto at start-up, then --wait-policy spin: lmtrain's GOMP_SPINCOUNT is removed again.
  CliResult spin = run_env("LMT_LOG_LEVEL=debug", kTinyBench + " --wait-policy spin");
  ASSERT_EQ(spin.code, 0) << spin.out;
  EXPECT_EQ(count(spin.out, "restarting once"), 2u) << spin.out;
  EXPECT_EQ(last_json(spin.out)["omp"]["wait_policy"], "spin");
  EXPECT_EQ(last_json(spin.out)["omp"]["GOMP_SPINCOUNT"], "");
}

TEST(WaitPolicyCli, TheUsersOwnVariablesWinAndNothingRestarts) {
  for (const std::string env : {"GOMP_SPINCOUNT=1234", "OMP_WAIT_POLICY=active"}) {
    CliResult r = run_env("LMT_LOG_LEVEL=debug " + env, kTinyBench + " --wait-policy passive");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(count(r.out, "restarting once"), 0u) << r.out;
    const nlohmann::json j = last_json(r.out);
    EXPECT_EQ(j["omp"]["wait_policy"], "user");
    if (env[0] == 'G') EXPECT_EQ(j["omp"]["GOMP_SPINCOUNT"], "1234");
    else EXPECT_EQ(j["omp"]["OMP_WAIT_POLICY"], "active");
  }
}

TEST(WaitPolicyCli, ARestartLoopIsCutAndTheCommandStillRuns) {
  CliResult r = run_env("LMT_OMP_REEXEC=3", kTinyBench);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("restarted too often"), std::string::npos) << r.out;
  EXPECT_EQ(last_json(r.out)["omp"]["wait_policy"], "spin");  // nothing applied: the runtime's default
}

TEST(WaitPolicyCli, ExitCodesAndMessagesPassThroughTheRestart) {
  CliResult bad = run_env("", "bench train --preset no-such-preset");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_EQ(count(bad.out, "no-such-preset"), 1u) << bad.out;
  CliResult usage = run_env("", "bench train --no-such-flag");
  EXPECT_EQ(usage.code, 2) << usage.out;
  CliResult version = run_env("", "--version", /*with_stderr=*/false);
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(count(version.out, "lmtrain "), 1u) << version.out;
  CliResult env = run_env("LMT_WAIT_POLICY=sometimes", "--version");
  EXPECT_EQ(env.code, 2) << env.out;
  EXPECT_NE(env.out.find("LMT_WAIT_POLICY"), std::string::npos) << env.out;
  CliResult flag = run_env("", kTinyBench + " --wait-policy sometimes");
  EXPECT_EQ(flag.code, 1) << flag.out;
  EXPECT_NE(flag.out.find("--wait-policy = \"sometimes\""), std::string::npos) << flag.out;
}

TEST(ContendCli, ReportsIdleAndContendedFiguresAndReapsTheBusyLoop) {
  CliResult r = run_env("", "bench train --preset tiny --micro-batch 1 --seq-len 16 --dtype fp32 --warmup 1 --iters 2 --contend --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = last_json(r.out);
  ASSERT_TRUE(j.contains("contend")) << r.out;
  const nlohmann::json& c = j["contend"];
  EXPECT_EQ(c["rounds"].get<int>(), 2);
  EXPECT_GT(c["idle_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(c["contended_tokens_per_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(c["slowdown"].get<double>(), c["contended_seconds"].get<double>() / c["idle_seconds"].get<double>());
  EXPECT_DOUBLE_EQ(c["idle_tokens_per_s"].get<double>(), j["tokens_per_s"].get<double>());
  const int pid = c["busy_pid"].get<int>();
  EXPECT_EQ(busy_pid_in(r.out), pid);
  EXPECT_EQ(lmt::test::process_state(pid), 0) << "busy-loop process " << pid << " left behind";
}

TEST(ContendCli, AnErrorAfterTheBusyLoopStartedReapsIt) {
  // The memory check fails after the busy loop started (it starts before the model is built).
  CliResult r = run_env("", "bench train --preset gpt2-124m --micro-batch 1000000 --seq-len 1024 --contend");
  EXPECT_EQ(r.code, 1) << r.out;
  const int pid = busy_pid_in(r.out);
  ASSERT_GT(pid, 0) << r.out;
  EXPECT_EQ(lmt::test::process_state(pid), 0) << "busy-loop process " << pid << " left behind";
}

class ContendSignal : public lmt::test::ScratchDirTest, public ::testing::WithParamInterface<int> {};

TEST_P(ContendSignal, TheBusyLoopDiesWithTheCommand) {
  const std::string err = path("stderr.txt");
  const pid_t cmd = lmt::test::spawn_shell(kClean + LMTRAIN_BIN +
                                           " bench train --preset tiny --micro-batch 1 --seq-len 16 --dtype fp32 "
                                           "--iters 1000000 --contend >/dev/null 2>" + err);
  int busy = -1;
  for (int i = 0; i < 3000 && busy < 0; ++i) {
    std::ifstream in(err);
    std::stringstream ss;
    ss << in.rdbuf();
    busy = busy_pid_in(ss.str());
    if (busy < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(busy, 0) << "no busy-loop line on stderr";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // some rounds run
  kill(cmd, GetParam());
  EXPECT_EQ(lmt::test::wait_exit(cmd, 30), 128 + GetParam());
  EXPECT_TRUE(lmt::test::ends_within(busy, 5.0)) << "busy-loop process " << busy << " outlived lmtrain (signal " << GetParam() << ")";
}

INSTANTIATE_TEST_SUITE_P(Signals, ContendSignal, ::testing::Values(SIGTERM, SIGKILL));

}  // namespace
