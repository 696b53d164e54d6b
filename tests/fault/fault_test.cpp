// Fault injection against `lmtrain train`, run as a user runs it (docs/RELIABILITY.md), on a tiny
// model and a synthetic dataset, modelled on leveldb's fault-injection tests and SQLite's crash tests:
//   - SIGKILL at random moments (startup, steps, async checkpoint writes), at least 20 times, each
//     followed by `--resume`: every committed checkpoint always verifies, the finished run's losses
//     are bit-identical to an uninterrupted run's, each step is logged once, no *.tmp is left;
//   - SIGTERM mid-run: the step finishes, its checkpoint is saved, exit status 3, and the resumed
//     run continues the same losses; a second SIGINT ends the process at once;
//   - a full disk (a small tmpfs in a private mount namespace): the error names the path, the
//     previous checkpoints stay intact, and the run continues once space is freed;
//   - a read-only run directory: an error naming the path, nothing lost;
//   - one flipped byte or a truncation in each file of the newest checkpoint: the manifest catches
//     it, the checkpoint is renamed aside and the run resumes from the one before;
//   - only incomplete checkpoints (*.tmp), a torn metrics line, a damaged validation shard, two runs
//     on one directory.
// The schedule is constant, so a run's losses do not depend on its max_steps: runs of different
// lengths can be compared step by step.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"
#include "lmt/io/checkpoint_dir.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kExitStopped = 3;  // base/stop_signal.h
constexpr const char* kCheckpointFiles[] = {"model.safetensors", "model.json", "optimizer.safetensors",
                                            "trainer_state.json", "config.toml", "manifest.json"};

class FaultTest : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    test::ScratchDirTest::SetUp();
    test::write_markov_dataset(path("data"), 64, "fault_test");
    std::ofstream(path("recipe.toml")) << test::tiny_recipe_head(path("data")) <<
                                          "[train]\nseq_len = 32\nmicro_batch = 2\nmax_steps = 40\n"
                                          "dtype = 'fp32'\nlog_every = 1000\n"
                                          "[schedule]\nkind = 'constant'\nwarmup_steps = 2\n"
                                          "[eval]\nevery = 0\nbatches = 2\n"
                                          "[checkpoint]\nevery = 1\nkeep = 3\nasync = true\n";
  }

  std::string train_cmd(const std::string& run, const std::string& extra) const {
    return std::string(LMTRAIN_BIN) + " train --config " + path("recipe.toml") + " --run-dir " + run + " " + extra;
  }
  test::CliResult train(const std::string& run, const std::string& extra = "") const {
    return test::run_lmtrain("train --config " + path("recipe.toml") + " --run-dir " + run + " " + extra, true);
  }
  // Starts a run in the background (its own process group), output in `log`.
  pid_t launch(const std::string& run, const std::string& extra, const std::string& log) const {
    return test::spawn_shell(train_cmd(run, extra) + " > " + log + " 2>&1");
  }

  // step -> loss of every training-step record; *dups counts steps logged more than once.
  static std::map<int64_t, double> losses(const std::string& run, int* dups = nullptr) {
    std::map<int64_t, double> out;
    std::ifstream in(run + "/metrics.jsonl");
    std::string line;
    int d = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << "unparsable metrics line in " << run << ": " << line;
      if (j.is_discarded()) continue;
      EXPECT_TRUE(j.contains("type") && j["type"].is_string()) << "a record without a type: " << line;
      EXPECT_TRUE(j.contains("time") && j["time"].is_number()) << "a record without a time: " << line;
      if (j.value("type", "") != "step") continue;
      const int64_t step = j["step"].get<int64_t>();
      d += out.count(step) ? 1 : 0;
      out[step] = j["loss"].get<double>();
    }
    if (dups) *dups = d;
    return out;
  }
  // The header records of RUN/metrics.jsonl, in order.
  static std::vector<nlohmann::json> headers(const std::string& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("type", "") == "header") out.push_back(std::move(j));
    }
    return out;
  }
  // The newest step in metrics.jsonl (0 if none yet).
  static int64_t logged_step(const std::string& run) {
    const std::string text = test::read_bytes(run + "/metrics.jsonl");
    int64_t last = 0;
    for (size_t at = 0; (at = text.find("\"step\":", at)) != std::string::npos;) {
      at += 7;
      last = std::max<int64_t>(last, std::atoll(text.c_str() + at));
    }
    return last;
  }
  // Waits (up to 60 s) until `pid` has logged step `step` in RUN/metrics.jsonl, or has exited.
  static void wait_for_step(pid_t pid, const std::string& run, int64_t step) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (test::running(pid) && logged_step(run) < step && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Entries of RUN/checkpoints whose names end with `suffix`.
  static std::vector<std::string> with_suffix(const std::string& run, const std::string& suffix) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run + "/checkpoints", ec))
      if (e.path().filename().string().ends_with(suffix)) out.push_back(e.path().string());
    return out;
  }
  // Every committed checkpoint (step_XXXXXXXX) verifies against its manifest.
  static void expect_committed_valid(const std::string& run) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run + "/checkpoints", ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() == 13 && name.starts_with("step_")) {
        const Status s = io::verify_checkpoint(e.path().string());
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    }
  }
  // The reference: an uninterrupted run of `steps` steps (computed once per test).
  std::map<int64_t, double> reference(int64_t steps) {
    const auto r = train(path("ref"), "--set train.max_steps=" + std::to_string(steps));
    EXPECT_EQ(r.code, 0) << r.out;
    return losses(path("ref"));
  }
  static void expect_same_losses(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want) {
    for (const auto& [step, loss] : got) {
      auto it = want.find(step);
      if (it == want.end()) continue;
      EXPECT_EQ(loss, it->second) << "step " << step << ": not bit-identical to the uninterrupted run";
    }
  }
  // Runs a shell script in private user + mount namespaces (`unshare -rm`), where it may mount a
  // tmpfs. False (and the test should skip) where such namespaces are not allowed.
  bool run_in_namespace(const std::string& script, std::string* out) {
    if (std::system("unshare -rm sh -c 'mount -t tmpfs -o size=1m tmpfs /mnt' >/dev/null 2>&1") != 0) return false;
    test::write_bytes(path("script.sh"), "set -u\n" + script);
    const int code = std::system(("unshare -rm sh " + path("script.sh") + " > " + path("script.log") + " 2>&1").c_str());
    *out = test::read_bytes(path("script.log"));
    EXPECT_EQ(code, 0) << *out;
    return true;
  }
};

TEST_F(FaultTest, KilledAtRandomMomentsEveryResumeContinuesBitForBit) {
  // Each launch advances 0-2 logged steps plus up to 30 ms of steps (a few, on an idle machine), and
  // at most 24 launches are killed: 100 steps leave room for 20+ kills however fast the steps run.
  const int64_t kSteps = 100;
  const auto want = reference(kSteps);
  ASSERT_EQ(static_cast<int64_t>(want.size()), kSteps);
  const std::string run = path("killed"), log = path("killed.log");
  std::mt19937 rng(20);
  int kills = 0, launches = 0;
  bool finished = false;
  while (!finished && launches < 200) {
    ++launches;
    const int64_t from = logged_step(run);
    // Kill after 0-2 more logged steps plus up to 30 ms: in startup, a step, or a checkpoint write
    // (one is written, in the background, after every step).
    const int64_t until = from + static_cast<int64_t>(rng() % 3);
    const auto delay = std::chrono::microseconds(rng() % 30000);
    const pid_t pid = launch(run, "--resume --set train.max_steps=" + std::to_string(kSteps), log);
    ASSERT_GT(pid, 0);
    wait_for_step(pid, run, until);
    std::this_thread::sleep_for(delay);
    if (test::running(pid) && kills < 24) {
      kill(pid, SIGKILL);
      ++kills;
    }
    const int code = test::wait_exit(pid, 60);
    if (code == 0) finished = true;
    else ASSERT_EQ(code, 128 + SIGKILL) << test::read_bytes(log);
    expect_committed_valid(run);
    ASSERT_TRUE(with_suffix(run, ".corrupt").empty()) << "a kill damaged a committed checkpoint";
  }
  ASSERT_TRUE(finished) << "the run never finished after " << launches << " launches";
  EXPECT_GE(kills, 20) << "too few kills landed while the run was alive";
  int dups = -1;
  const auto got = losses(run, &dups);
  EXPECT_EQ(dups, 0) << "a step was logged twice";
  EXPECT_EQ(got.size(), want.size());
  expect_same_losses(got, want);
  EXPECT_TRUE(with_suffix(run, ".tmp").empty()) << "a stray incomplete checkpoint was left";
  EXPECT_TRUE(with_suffix(run, ".pruning").empty()) << "a half-pruned checkpoint was left";
  std::printf("fault: %d SIGKILLs over %d launches; every resume continued bit for bit\n", kills, launches);
}

TEST_F(FaultTest, SigtermFinishesTheStepSavesACheckpointAndTheResumeContinuesTheLosses) {
  const auto want = reference(40);
  const std::string run = path("term"), log = path("term.log");
  const pid_t pid = launch(run, "--set train.max_steps=100000 --set checkpoint.every=0", log);
  wait_for_step(pid, run, 5);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const auto sent = Clock::now();
  const int code = test::wait_exit(pid, 30);
  const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
  const std::string out = test::read_bytes(log);
  ASSERT_EQ(code, kExitStopped) << out;
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(out.find("stopped by SIGTERM after step"), std::string::npos) << out;
  EXPECT_NE(out.find("hint: continue it with the same command and --resume"), std::string::npos) << out;
  const int64_t step = logged_step(run);
  ASSERT_GE(step, 5);
  ASSERT_LE(step, 35);
  EXPECT_TRUE(io::verify_checkpoint(run + "/checkpoints/" + io::checkpoint_name(step)).ok())
      << "no checkpoint at the step reached, " << step;
  const auto r = train(run, "--resume --allow-changes --set train.max_steps=40");
  ASSERT_EQ(r.code, 0) << r.out;
  int dups = -1;
  const auto got = losses(run, &dups);
  EXPECT_EQ(dups, 0);
  EXPECT_EQ(got.size(), 40u);
  expect_same_losses(got, want);
  // One header per start: the first a fresh run's, the second naming the step it resumed from.
  const auto h = headers(run);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_FALSE(h[0].contains("resumed_from_step")) << h[0].dump();
  EXPECT_EQ(h[1]["resumed_from_step"], step) << h[1].dump();
  for (const auto& j : h) {
    EXPECT_NE(j["config_toml"].get<std::string>().find("max_steps"), std::string::npos) << j.dump();
    EXPECT_EQ(j["world"]["world_size"], 1);
  }
}

// Two SIGINTs sent to the process merge into one delivery while pending, and one sent after the
// first was handled may arrive after the graceful stop has finished (a race under load). So the
// process is stopped (SIGSTOP), each of two of its threads that do not block SIGINT gets one
// (tgkill: a thread's pending signals are its own, they do not merge), and it is continued: the two
// handlers run before the step can end, and the second must end the process at once.
TEST_F(FaultTest, ASecondSigintEndsTheProcessAtOnce) {
  const std::string run = path("int"), log = path("int.log");
  const pid_t pid = launch(run, "--set train.max_steps=100000 --set checkpoint.every=0", log);
  wait_for_step(pid, run, 2);
  ASSERT_TRUE(test::running(pid)) << test::read_bytes(log);
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  auto field = [](const std::string& status, const char* key) {
    const size_t at = status.find(key);
    return at == std::string::npos ? std::string() : status.substr(at + std::string(key).size(), 32);
  };
  // Every thread stopped ("State:\tT"), then the ones whose SigBlk leaves SIGINT deliverable.
  std::vector<pid_t> takers;
  const auto until = Clock::now() + std::chrono::seconds(10);
  for (bool stopped = false; !stopped && Clock::now() < until;) {
    stopped = true;
    takers.clear();
    for (const auto& e : fs::directory_iterator(task)) {
      const std::string st = test::read_bytes(e.path().string() + "/status");
      if (field(st, "State:\t").rfind("T", 0) != 0) stopped = false;
      if ((std::strtoull(field(st, "SigBlk:\t").c_str(), nullptr, 16) & (1ull << (SIGINT - 1))) == 0)
        takers.push_back(static_cast<pid_t>(std::stol(e.path().filename().string())));
    }
    if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(takers.size(), 2u) << "lmtrain has fewer than two threads that take SIGINT";
  for (int i = 0; i < 2; ++i) ASSERT_EQ(syscall(SYS_tgkill, pid, takers[static_cast<size_t>(i)], SIGINT), 0);
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  EXPECT_EQ(test::wait_exit(pid, 30), 128 + SIGINT) << test::read_bytes(log);
}

TEST_F(FaultTest, AFullDiskNamesThePathKeepsThePreviousCheckpointsAndTheRunContinuesOnceSpaceIsFreed) {
  const auto want = reference(12);
  // One checkpoint's size, to size the disk so that the third or so does not fit.
  int64_t ckpt_bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(path("ref/checkpoints/" + io::checkpoint_name(12))))
    if (e.is_regular_file()) ckpt_bytes += static_cast<int64_t>(e.file_size());
  const int64_t disk_kb = (ckpt_bytes * 5 / 2 + 64 * 1024) / 1024;
  const std::string mnt = path("mnt"), out_dir = path("saved");
  fs::create_directories(mnt);
  const std::string train_args = "--set train.max_steps=12 --set checkpoint.every=2 --set checkpoint.keep=0";
  std::string out;
  const bool ran = run_in_namespace(
      "mount -t tmpfs -o size=" + std::to_string(disk_kb) + "k tmpfs " + mnt + " || exit 1\n" +
          train_cmd(mnt + "/run", train_args) + " > " + path("full.log") + " 2>&1\n"
          "echo \"first=$?\"\n"
          "cp -a " + mnt + "/run " + out_dir + "\n"
          "mount -o remount,size=64m " + mnt + " || exit 1\n" +
          train_cmd(mnt + "/run", train_args + " --resume") + " > " + path("freed.log") + " 2>&1\n"
          "echo \"second=$?\"\n"
          "cp -a " + mnt + "/run " + path("final") + "\n",
      &out);
  if (!ran) GTEST_SKIP() << "needs `unshare -rm` (user and mount namespaces) to mount a private tmpfs";
  const std::string full = test::read_bytes(path("full.log"));
  EXPECT_NE(out.find("first=1"), std::string::npos) << out << full;
  EXPECT_NE(full.find("No space left on device"), std::string::npos) << full;
  EXPECT_NE(full.find(mnt + "/run/"), std::string::npos) << "the error does not name the path:\n" << full;
  // Every checkpoint committed before the disk filled is intact.
  ASSERT_FALSE(io::find_latest_checkpoint(out_dir + "/checkpoints", nullptr).status().code() == StatusCode::kNotFound)
      << "no checkpoint fit on the disk (" << disk_kb << " KiB):\n" << full;
  expect_committed_valid(out_dir);
  EXPECT_NE(out.find("second=0"), std::string::npos) << out << test::read_bytes(path("freed.log"));
  int dups = -1;
  const auto got = losses(path("final"), &dups);
  EXPECT_EQ(dups, 0);
  EXPECT_EQ(got.size(), 12u);
  expect_same_losses(got, want);
  EXPECT_TRUE(io::verify_checkpoint(path("final/checkpoints/") + io::checkpoint_name(12)).ok());
}

TEST_F(FaultTest, AReadOnlyRunDirectoryIsAnErrorNamingThePath) {
  const std::string mnt = path("mnt");
  fs::create_directories(mnt);
  std::string out;
  const bool ran = run_in_namespace(
      "mount -t tmpfs -o size=16m tmpfs " + mnt + " || exit 1\n" +
          train_cmd(mnt + "/run", "--set train.max_steps=2") + " > /dev/null 2>&1 || exit 1\n"
          "mount -o remount,ro " + mnt + " || exit 1\n" +
          train_cmd(mnt + "/run", "--set train.max_steps=4 --resume --allow-changes") + " > " + path("resume.log") + " 2>&1\n"
          "echo \"resume=$?\"\n" +
          train_cmd(mnt + "/new", "--set train.max_steps=2") + " > " + path("new.log") + " 2>&1\n"
          "echo \"new=$?\"\n"
          "cp -a " + mnt + "/run " + path("saved") + "\n",
      &out);
  if (!ran) GTEST_SKIP() << "needs `unshare -rm` (user and mount namespaces) to mount a private tmpfs";
  const std::string resume = test::read_bytes(path("resume.log")), fresh = test::read_bytes(path("new.log"));
  EXPECT_NE(out.find("resume=1"), std::string::npos) << out << resume;
  EXPECT_NE(resume.find(mnt + "/run"), std::string::npos) << resume;
  EXPECT_NE(resume.find("Read-only file system"), std::string::npos) << resume;
  EXPECT_NE(out.find("new=1"), std::string::npos) << out << fresh;
  EXPECT_NE(fresh.find(mnt + "/new"), std::string::npos) << fresh;
  EXPECT_TRUE(io::verify_checkpoint(path("saved/checkpoints/") + io::checkpoint_name(2)).ok());
}

TEST_F(FaultTest, ADamagedFileInTheNewestCheckpointIsRenamedAsideAndTheRunResumesFromTheOneBefore) {
  const auto want = reference(6);
  const std::string base = path("base");
  ASSERT_EQ(train(base, "--set train.max_steps=4 --set checkpoint.every=2 --set checkpoint.keep=0").code, 0);
  const std::string newest = io::checkpoint_name(4);
  int cases = 0;
  for (const char* file : kCheckpointFiles) {
    for (const bool truncate : {false, true}) {
      const std::string run = path(std::string("damaged_") + file + (truncate ? "_cut" : "_flip"));
      fs::copy(base, run, fs::copy_options::recursive);
      const std::string victim = run + "/checkpoints/" + newest + "/" + file;
      std::string bytes = test::read_bytes(victim);
      ASSERT_GT(bytes.size(), 2u);
      if (truncate) bytes.resize(bytes.size() / 2);
      else bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
      test::write_bytes(victim, bytes);
      const auto r = train(run, "--resume --allow-changes --set train.max_steps=6 --set checkpoint.every=2 --set checkpoint.keep=0");
      ASSERT_EQ(r.code, 0) << file << (truncate ? " truncated" : " flipped") << ":\n" << r.out;
      EXPECT_NE(r.out.find(newest + " is damaged"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("resumed from " + run + "/checkpoints/" + io::checkpoint_name(2)), std::string::npos) << r.out;
      EXPECT_TRUE(fs::exists(run + "/checkpoints/" + newest + ".corrupt")) << "not renamed aside";
      EXPECT_TRUE(io::verify_checkpoint(run + "/checkpoints/" + newest).ok()) << "step 4 was not committed again";
      int dups = -1;
      const auto got = losses(run, &dups);
      EXPECT_EQ(dups, 0);
      EXPECT_EQ(got.size(), 6u);
      expect_same_losses(got, want);
      ++cases;
    }
  }
  std::printf("fault: %d damaged checkpoints (each file flipped and truncated) recovered\n", cases);
}

// `eval` on a run directory used to fall back to an older checkpoint without a word.
TEST_F(FaultTest, EvalOnARunWithADamagedNewestCheckpointSaysWhichOneItUses) {
  const std::string run = path("eval_run");
  ASSERT_EQ(train(run, "--set train.max_steps=4 --set checkpoint.every=2 --set checkpoint.keep=0").code, 0);
  const std::string victim = run + "/checkpoints/" + io::checkpoint_name(4) + "/model.safetensors";
  std::string bytes = test::read_bytes(victim);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  test::write_bytes(victim, bytes);
  const auto r = test::run_lmtrain("eval --checkpoint " + run + " --task val --data " + path("data") + " --limit 1 --seq-len 32", true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("skipping damaged checkpoint " + run + "/checkpoints/" + io::checkpoint_name(4)), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("using " + run + "/checkpoints/" + io::checkpoint_name(2)), std::string::npos) << r.out;
}

TEST_F(FaultTest, OnlyIncompleteCheckpointsStartOverWithAWarning) {
  const auto want = reference(4);
  const std::string run = path("tmp_only");
  ASSERT_EQ(train(run, "--set train.max_steps=1").code, 0);
  // As if killed during the first save: the checkpoint never committed.
  fs::rename(run + "/checkpoints/" + io::checkpoint_name(1), run + "/checkpoints/" + io::checkpoint_name(1) + ".tmp");
  fs::remove(run + "/checkpoints/" + io::checkpoint_name(1) + ".tmp/manifest.json");
  auto r = train(run, "--set train.max_steps=4");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("only checkpoints are incomplete"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pass --resume to start it over"), std::string::npos) << r.out;
  r = train(run, "--resume --allow-changes --set train.max_steps=4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("removing incomplete checkpoint"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("starting from step 0"), std::string::npos) << r.out;
  int dups = -1;
  const auto got = losses(run, &dups);
  EXPECT_EQ(dups, 0);
  EXPECT_EQ(got.size(), 4u);
  expect_same_losses(got, want);
  EXPECT_TRUE(with_suffix(run, ".tmp").empty());
}

TEST_F(FaultTest, ATornMetricsLineIsRepairedOnResume) {
  const std::string run = path("torn");
  ASSERT_EQ(train(run, "--set train.max_steps=3").code, 0);
  std::ofstream(run + "/metrics.jsonl", std::ios::app) << "{\"step\": 4, \"loss\": 3.1";  // a crash mid-line
  const auto r = train(run, "--resume --allow-changes --set train.max_steps=5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("dropped a torn last line"), std::string::npos) << r.out;
  int dups = -1;
  EXPECT_EQ(losses(run, &dups).size(), 5u);  // every line parses (checked inside)
  EXPECT_EQ(dups, 0);
}

TEST_F(FaultTest, ADamagedValidationShardIsNamedBeforeTraining) {
  std::string shard;
  for (const auto& e : fs::directory_iterator(path("data")))
    if (e.path().filename().string().find("val") != std::string::npos && e.path().extension() != ".json")
      shard = e.path().string();
  ASSERT_FALSE(shard.empty()) << "no val shard in " << path("data");
  std::string bytes = test::read_bytes(shard);
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 1);
  test::write_bytes(shard, bytes);
  const auto r = train(path("badval"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(shard), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("badval/checkpoints"))) << "trained on before the check";
}

TEST_F(FaultTest, ASecondRunOnTheSameDirectoryIsRefusedNamingTheHolder) {
  const std::string run = path("locked"), log = path("locked.log");
  const pid_t pid = launch(run, "--set train.max_steps=100000 --set checkpoint.every=0", log);
  wait_for_step(pid, run, 1);
  const auto r = train(run, "--resume --allow-changes");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is in use by pid " + std::to_string(pid)), std::string::npos) << r.out;
  kill(pid, SIGTERM);
  EXPECT_EQ(test::wait_exit(pid, 30), kExitStopped) << test::read_bytes(log);
}

}  // namespace
}  // namespace lmt
