// Training progress as a user sees it (issue #19, src/lmt/progress): on a terminal (a real
// pseudo-terminal here) a bar redrawn in place with an ETA; in a pipe plain lines with no "\r",
// always one after the first step (log_every = 50 with max_steps = 30 used to print nothing), and
// loss figures that are the logging window's mean of metrics.jsonl's raw per-step losses.
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/synthetic_dataset.h"

namespace lmt {
namespace {

struct Output {
  int code = -1;
  std::string out, err;
};

class ProgressCli : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    test::ScratchDirTest::SetUp();
    test::write_markov_dataset(path("data"), 64, "progress_cli_test");
  }
  void write_recipe(int max_steps, int log_every, int eval_every = 0) const {
    std::ofstream(path("recipe.toml")) << test::tiny_recipe_head(path("data")) << "[train]\nseq_len = 32\nmicro_batch = 2\nmax_steps = "
                                       << max_steps << "\ndtype = 'fp32'\nlog_every = " << log_every
                                       << "\n[eval]\nevery = " << eval_every << "\nbatches = 2\n[checkpoint]\nasync = false\n";
  }
  std::string train_args() const {
    return " train --config " + path("recipe.toml") + " --run-dir " + path("run");
  }
  // stdout through a pipe, stderr to a file: neither is a terminal.
  Output run_piped(const std::string& args) const {
    const std::string cmd = std::string(LMTRAIN_BIN) + args + " 2>" + path("stderr.txt");
    Output o;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return o;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
    const int status = pclose(p);
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.err = test::read_bytes(path("stderr.txt"));
    return o;
  }
  // stdout and stderr on a pseudo-terminal of 100 columns, as in an interactive shell.
  Output run_on_terminal(const std::string& args) const {
    winsize ws{};
    ws.ws_col = 100;
    ws.ws_row = 30;
    int master = -1;
    const pid_t pid = forkpty(&master, nullptr, nullptr, &ws);
    if (pid == 0) {
      const std::string cmd = "exec " + std::string(LMTRAIN_BIN) + args;
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    Output o;
    if (pid < 0) return o;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(master, buf, sizeof buf);
      if (n > 0) o.out.append(buf, static_cast<size_t>(n));
      else if (n < 0 && errno == EINTR) continue;
      else break;  // EIO: the child closed the terminal
    }
    close(master);
    int status = 0;
    waitpid(pid, &status, 0);
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return o;
  }
  std::vector<double> losses(const std::string& type = "step", const std::string& key = "loss") const {
    std::vector<double> out;
    std::ifstream in(path("run/metrics.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == type) out.push_back(j[key].get<double>());
    }
    return out;
  }
  static std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(prefix, 0) == 0) out.push_back(line);
    return out;
  }
  static std::string mean_text(const std::vector<double>& v, size_t from, size_t to) {  // [from, to)
    double s = 0;
    for (size_t i = from; i < to; ++i) s += v[i];
    char buf[32];
    std::snprintf(buf, sizeof buf, "loss %.4f |", s / static_cast<double>(to - from));
    return buf;
  }
};

TEST_F(ProgressCli, LogEveryAboveMaxStepsStillPrintsTheFirstAndTheLastStep) {
  write_recipe(30, 50);
  const Output o = run_piped(train_args());
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_EQ(o.err.find('\r'), std::string::npos) << "a bar was drawn into a file:\n" << o.err;
  EXPECT_EQ(o.err.find("\x1b["), std::string::npos) << o.err;
  const auto steps = lines_starting(o.err, "step ");
  ASSERT_EQ(steps.size(), 2u) << o.err;
  const std::vector<double> loss = losses();
  ASSERT_EQ(loss.size(), 30u);
  EXPECT_EQ(steps[0].rfind("step 1/30 3% | " + mean_text(loss, 0, 1), 0), 0u) << steps[0];
  EXPECT_NE(steps[0].find("tok/s | MFU "), std::string::npos) << steps[0];
  EXPECT_NE(steps[0].find("| ETA "), std::string::npos) << steps[0];
  // The last line: the mean over the window (all 30 steps: fewer than log_every), and the time taken.
  EXPECT_EQ(steps[1].rfind("step 30/30 100% | " + mean_text(loss, 0, 30), 0), 0u) << steps[1];
  EXPECT_NE(steps[1].find(" elapsed"), std::string::npos) << steps[1];
  // Progress is stderr's; stdout keeps the run's summary lines.
  EXPECT_EQ(o.out.find("step 1/30"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("run directory: "), std::string::npos) << o.out;
}

TEST_F(ProgressCli, LinesEveryLogEveryStepsShowTheWindowMean) {
  write_recipe(25, 10, 10);
  const Output o = run_piped(train_args());
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const auto steps = lines_starting(o.err, "step ");
  ASSERT_EQ(steps.size(), 4u) << o.err;  // steps 1, 10, 20, 25
  const std::vector<double> loss = losses();
  ASSERT_EQ(loss.size(), 25u);
  EXPECT_EQ(steps[0].rfind("step 1/25 4% | " + mean_text(loss, 0, 1), 0), 0u) << steps[0];
  EXPECT_EQ(steps[1].rfind("step 10/25 40% | " + mean_text(loss, 0, 10), 0), 0u) << steps[1];
  EXPECT_EQ(steps[2].rfind("step 20/25 80% | " + mean_text(loss, 10, 20), 0), 0u) << steps[2];   // steps 11..20
  EXPECT_EQ(steps[3].rfind("step 25/25 100% | " + mean_text(loss, 15, 25), 0), 0u) << steps[3];  // the last 10
  // The newest validation loss, once there is one (eval.every = 10: steps 10 and 20, then the final).
  const std::vector<double> val = losses("val", "val_loss");
  ASSERT_EQ(val.size(), 3u);
  char at10[48], at20[48];
  std::snprintf(at10, sizeof at10, "| val loss %.4f |", val[0]);
  std::snprintf(at20, sizeof at20, "| val loss %.4f |", val[1]);
  EXPECT_EQ(steps[0].find("val loss"), std::string::npos) << steps[0];
  EXPECT_EQ(steps[1].rfind("step 10/25 40% | " + mean_text(loss, 0, 10) + std::string(at10 + 1), 0), 0u) << steps[1];
  EXPECT_NE(steps[2].find(at20), std::string::npos) << steps[2];
}

TEST_F(ProgressCli, OnATerminalTheBarIsRedrawnInPlace) {
  write_recipe(30, 50);
  const Output o = run_on_terminal(train_args());
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("\rstep ["), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\x1b[K"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("ETA "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("] 30/30 100%"), std::string::npos) << o.out;
  // The bar replaces the plain lines: no "step 1/30" line of its own.
  EXPECT_EQ(o.out.find("\nstep 1/30"), std::string::npos) << o.out;
  if (std::getenv("LMT_SHOW_OUTPUT") != nullptr) std::fprintf(stderr, "%s", o.out.c_str());
}

TEST_F(ProgressCli, WarningLogLevelShowsNoProgress) {
  write_recipe(5, 50);
  const Output o = run_piped(" train --config " + path("recipe.toml") + " --run-dir " + path("run"));
  ASSERT_EQ(o.code, 0);
  ASSERT_FALSE(lines_starting(o.err, "step ").empty());
  const std::string quiet = std::string("LMT_LOG_LEVEL=warning ");
  FILE* p = popen((quiet + LMTRAIN_BIN + " train --config " + path("recipe.toml") + " --run-dir " + path("run2") +
                   " 2>&1 >/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string err;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) err.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << err;
  EXPECT_TRUE(lines_starting(err, "step ").empty()) << err;
}

}  // namespace
}  // namespace lmt
