// Fault behaviour of data-parallel training, as a user meets it: `mpirun -np 2 lmtrain train` on a
// tiny model, then
//  - rank 1 is killed (SIGKILL) mid-run: every rank stops within 10 s, mpirun exits non-zero naming
//    rank 1, and the last checkpoint verifies and resumes in one process, then on two ranks;
//  - SIGTERM reaches rank 1 only: both ranks stop after the same step, with its checkpoint;
//  - a run of 4 steps is resumed by 2 ranks, and rank 0 alone hits an error at step 6 (a file
//    already has that checkpoint's name, and lmtrain never overwrites one) while rank 1 waits in
//    a collective: every rank stops with a message naming rank 0 and the error, and the step-4
//    checkpoint stays intact;
//  - rank 1 hangs (SIGSTOP): rank 0's stall watchdog ends the job after train.stall_timeout_s.
// The test launches mpirun itself (it is not run under it). Skips where mpirun or MPI is missing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"
#include "lmt/io/checkpoint_dir.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class DistFaultTest : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    if (std::string(LMT_MPIRUN).empty()) GTEST_SKIP() << "mpirun or MPI not found at configure time";
    test::ScratchDirTest::SetUp();
    test::write_markov_dataset(path("data"), 64, "dist_fault_test");
    std::ofstream(path("recipe.toml")) << test::tiny_recipe_head(path("data")) <<
                                          "[train]\nseq_len = 32\nmicro_batch = 2\nmax_steps = 1000000\n"
                                          "dtype = 'fp32'\nlog_every = 1000\n"
                                          "[eval]\nevery = 0\n"
                                          "[checkpoint]\nevery = 2\nkeep = 3\nasync = false\n";
  }

  // Starts `mpirun -np 2 lmtrain train --config recipe.toml --run-dir RUN EXTRA` with stdout and
  // stderr in log(); returns mpirun's pid.
  pid_t launch(const std::string& run_dir, const std::string& extra = "") {
    return test::spawn_shell(std::string(LMT_MPIRUN) +
                             " --allow-run-as-root --oversubscribe --mca btl self,vader"
                             " --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1 -np 2 " LMTRAIN_BIN
                             " train --config " + path("recipe.toml") + " --run-dir " + run_dir + " " + extra + " > " +
                             log() + " 2>&1");
  }
  std::string log() const { return path("mpirun.log"); }
  static int wait_exit(pid_t pid, double seconds) { return test::wait_exit(pid, seconds); }

  // Waits until `checkpoints_dir` holds a complete checkpoint (old ones are pruned as training goes on).
  static bool wait_for_checkpoint(const std::string& checkpoints_dir, double seconds) {
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      std::vector<std::string> skipped;
      if (fs::exists(checkpoints_dir) && io::find_latest_checkpoint(checkpoints_dir, &skipped).ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The pid of the child of `parent` whose environment says OMPI_COMM_WORLD_RANK=rank, or -1.
  static pid_t rank_pid(pid_t parent, int rank) {
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string stat = test::read_bytes(e.path().string() + "/stat");
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      int ppid = 0;
      char state = 0;
      if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != parent) continue;
      std::string env = test::read_bytes(e.path().string() + "/environ");
      for (size_t at = 0; at < env.size(); at = env.find('\0', at) + 1) {
        if (env.compare(at, want.size() + 1, want + '\0') == 0) return static_cast<pid_t>(std::stol(name));
        if (env.find('\0', at) == std::string::npos) break;
      }
    }
    return -1;
  }

  static bool alive(pid_t pid) {
    const std::string stat = test::read_bytes("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
  }

  // The step of the newest valid checkpoint, -1 if none.
  static int64_t latest_step(const std::string& run_dir) {
    auto latest = io::find_latest_checkpoint(run_dir + "/checkpoints", nullptr);
    if (!latest.ok()) return -1;
    std::ifstream in(*latest + "/trainer_state.json");
    return nlohmann::json::parse(in).at("step").get<int64_t>();
  }

  // The newest complete checkpoint verifies, and one process resumes from it (with the global batch
  // of the two ranks) for two more steps.
  void expect_resumable(const std::string& run_dir) {
    std::vector<std::string> skipped;
    auto latest = io::find_latest_checkpoint(run_dir + "/checkpoints", &skipped);
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_TRUE(io::verify_checkpoint(*latest).ok()) << *latest;
    std::ifstream in(*latest + "/trainer_state.json");
    const nlohmann::json st = nlohmann::json::parse(in);
    const int64_t step = st.at("step").get<int64_t>();
    const auto r = test::run_lmtrain("train --config " + path("recipe.toml") + " --run-dir " + run_dir +
                                         " --resume --allow-changes --set train.micro_batch=4 --set train.max_steps=" +
                                         std::to_string(step + 2),
                                     /*with_stderr=*/true);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  }
};

TEST_F(DistFaultTest, ARankThatDiesStopsEveryRankAndKeepsTheLastCheckpoint) {
  const std::string run = path("killed");
  const pid_t mpirun = launch(run);
  ASSERT_GT(mpirun, 0);
  if (!wait_for_checkpoint(run + "/checkpoints", 60)) {
    kill(-mpirun, SIGKILL);
    waitpid(mpirun, nullptr, 0);
    FAIL() << "no checkpoint within 60 s:\n" << test::read_bytes(log());
  }
  const pid_t r0 = rank_pid(mpirun, 0), r1 = rank_pid(mpirun, 1);
  ASSERT_GT(r0, 0) << "rank 0's process not found";
  ASSERT_GT(r1, 0) << "rank 1's process not found";
  ASSERT_EQ(kill(r1, SIGKILL), 0);
  const auto killed = Clock::now();
  const int code = wait_exit(mpirun, 60);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  const std::string out = test::read_bytes(log());
  ASSERT_NE(code, -1) << "mpirun still running 60 s after rank 1 died:\n" << out;
  EXPECT_LT(seconds, 10.0) << "the job took " << seconds << " s to end after rank 1 died";
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << "no message names rank 1:\n" << out;
  for (int i = 0; i < 100 && alive(r0); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(alive(r0)) << "rank 0 outlived the job";
  expect_resumable(run);
  // ... and on two ranks again.
  const int64_t step = latest_step(run);
  ASSERT_EQ(wait_exit(launch(run, "--resume --allow-changes --set train.max_steps=" + std::to_string(step + 2)), 60), 0)
      << test::read_bytes(log());
  EXPECT_EQ(latest_step(run), step + 2);
}

// SIGTERM reaches one rank only (a scheduler signals each task; here rank 1): every rank stops
// after the same step, the checkpoint of that step is saved, each rank exits with status 3 (mpirun
// passes a non-zero status on), and two ranks resume from it.
TEST_F(DistFaultTest, SigtermOnOneRankStopsEveryRankAtTheSameStepWithACheckpoint) {
  const std::string run = path("sigterm");
  const pid_t mpirun = launch(run, "--set checkpoint.every=1000");
  ASSERT_GT(mpirun, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && test::read_bytes(run + "/metrics.jsonl").find("\"step\":3,") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t r1 = rank_pid(mpirun, 1);
  ASSERT_GT(r1, 0) << "rank 1's process not found";
  ASSERT_EQ(kill(r1, SIGTERM), 0);
  const int code = wait_exit(mpirun, 30);
  const std::string out = test::read_bytes(log());
  ASSERT_NE(code, -1) << "mpirun still running 30 s after SIGTERM:\n" << out;
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("stopped by SIGTERM"), std::string::npos) << out;
  const int64_t step = latest_step(run);
  EXPECT_GE(step, 3);
  EXPECT_NE(test::read_bytes(run + "/metrics.jsonl").find("\"event\":\"stopped\""), std::string::npos);
  ASSERT_EQ(wait_exit(launch(run, "--resume --allow-changes --set train.max_steps=" + std::to_string(step + 2)), 60), 0)
      << test::read_bytes(log());
  EXPECT_EQ(latest_step(run), step + 2);
}

// A rank that hangs (SIGSTOP: alive, making no progress) leaves rank 0 waiting in a collective
// that would never return: rank 0's stall watchdog ends it with status 4 after
// train.stall_timeout_s, naming the stall, mpirun then ends the job (the stopped rank too), and
// the last checkpoint verifies and resumes.
TEST_F(DistFaultTest, AHungRankEndsTheJobAfterTheStallTimeout) {
  const std::string run = path("hung");
  const pid_t mpirun = launch(run, "--set train.stall_timeout_s=5");
  ASSERT_GT(mpirun, 0);
  if (!wait_for_checkpoint(run + "/checkpoints", 60)) {
    kill(-mpirun, SIGKILL);
    waitpid(mpirun, nullptr, 0);
    FAIL() << "no checkpoint within 60 s:\n" << test::read_bytes(log());
  }
  const pid_t r1 = rank_pid(mpirun, 1);
  ASSERT_GT(r1, 0) << "rank 1's process not found";
  ASSERT_TRUE(test::running(mpirun)) << "the job ended before rank 1 was stopped:\n" << test::read_bytes(log());
  ASSERT_EQ(kill(r1, SIGSTOP), 0);
  const auto hung = Clock::now();
  const int code = wait_exit(mpirun, 60);
  const double seconds = std::chrono::duration<double>(Clock::now() - hung).count();
  const std::string out = test::read_bytes(log());
  if (code == -1) {
    kill(r1, SIGKILL);
    kill(-mpirun, SIGKILL);
    waitpid(mpirun, nullptr, 0);
    FAIL() << "mpirun still running 60 s after rank 1 hung:\n" << out;
  }
  EXPECT_LT(seconds, 30.0) << "the job took " << seconds << " s to end after rank 1 hung";
  EXPECT_EQ(code, 4) << out;  // mpirun passes on the first non-zero status: the watchdog's
  EXPECT_NE(out.find("rank 0/2: no progress for"), std::string::npos) << out;
  EXPECT_NE(out.find("hint: restart with the same command and --resume"), std::string::npos) << out;
  for (int i = 0; i < 100 && alive(r1); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool outlived = alive(r1);
  if (outlived) kill(r1, SIGKILL);
  EXPECT_FALSE(outlived) << "the hung rank outlived the job";
  expect_resumable(run);
}

TEST_F(DistFaultTest, AnErrorOnOneRankStopsEveryRankNamingIt) {
  const std::string run = path("error");
  ASSERT_EQ(wait_exit(launch(run, "--set train.max_steps=4"), 60), 0) << test::read_bytes(log());
  // The gradients' transport is named (nccl on GPUs).
  EXPECT_NE(test::read_bytes(log()).find("data parallel: 2 ranks (mpi), ZeRO-"), std::string::npos)
      << test::read_bytes(log());
  // lmtrain never overwrites a checkpoint: on resuming, rank 0 (the only writer) fails at step 6.
  // A file (not a directory, which resume would take for a damaged checkpoint and rename aside).
  const std::string blocker = run + "/checkpoints/" + io::checkpoint_name(6);
  std::ofstream(blocker) << "not lmtrain's\n";
  const pid_t mpirun = launch(run, "--resume --allow-changes");
  ASSERT_GT(mpirun, 0);
  const int code = wait_exit(mpirun, 60);
  const std::string out = test::read_bytes(log());
  ASSERT_NE(code, -1) << "mpirun still running 60 s after rank 0's error:\n" << out;
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("rank 0/2"), std::string::npos) << "no message names rank 0:\n" << out;
  EXPECT_NE(out.find(io::checkpoint_name(6) + " already exists"), std::string::npos) << out;
  EXPECT_EQ(test::read_bytes(blocker), "not lmtrain's\n") << "the blocker was overwritten";
  EXPECT_TRUE(io::verify_checkpoint(run + "/checkpoints/" + io::checkpoint_name(4)).ok());
}

}  // namespace
}  // namespace lmt
