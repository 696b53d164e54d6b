// `--backend NAME` and runtime.backend as a user meets them (issue #13, "Backends by name"):
// `lmtrain train --backend ref` trains the same tiny model as the cpu backend, step for step, within
// the op tolerances; an unknown name is refused naming the flag or key and listing the registered
// backends; generate, eval and the benchmarks take the flag too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"

namespace lmt {
namespace {

class BackendCli : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    test::ScratchDirTest::SetUp();
    test::write_markov_dataset(path("data"), 64, "backend_cli_test");
    // fp32, constant schedule, no eval or checkpoint until the end: 3 steps in well under a second
    // on cpu, a few seconds on ref.
    std::ofstream(path("recipe.toml")) << test::tiny_recipe_head(path("data")) <<
                                          "[train]\nseq_len = 32\nmicro_batch = 2\nmax_steps = 3\n"
                                          "dtype = 'fp32'\nlog_every = 1000\n"
                                          "[schedule]\nkind = 'constant'\nwarmup_steps = 0\n"
                                          "[eval]\nevery = 0\nbatches = 2\n"
                                          "[checkpoint]\nasync = false\n";
  }
  test::CliResult train(const std::string& run, const std::string& extra = "") const {
    return test::run_lmtrain("train --config " + path("recipe.toml") + " --run-dir " + path(run) + " " + extra, true);
  }
  // step -> loss of every training-step record in RUN/metrics.jsonl.
  std::map<int64_t, double> losses(const std::string& run) const {
    std::map<int64_t, double> out;
    std::ifstream in(path(run) + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("loss") || !j.contains("step")) continue;
      out[j["step"].get<int64_t>()] = j["loss"].get<double>();
    }
    return out;
  }
};

TEST_F(BackendCli, TrainOnRefMatchesCpuStepForStep) {
  const test::CliResult cpu = train("cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  const test::CliResult ref = train("ref", "--backend ref");
  ASSERT_EQ(ref.code, 0) << ref.out;
  const auto on_cpu = losses("cpu"), on_ref = losses("ref");
  ASSERT_EQ(on_cpu.size(), 3u);
  ASSERT_EQ(on_ref.size(), 3u);
  bool all_bitwise_equal = true;
  for (const auto& [step, loss] : on_cpu) {
    ASSERT_TRUE(on_ref.count(step)) << "step " << step;
    const double r = on_ref.at(step);
    EXPECT_TRUE(std::isfinite(loss) && std::isfinite(r));
    // The op tolerance (tests/kernels/op_test.cpp): 1e-4 relative, through three AdamW updates.
    EXPECT_NEAR(loss, r, 1e-4 * std::abs(r)) << "step " << step;
    all_bitwise_equal = all_bitwise_equal && loss == r;
  }
  // fp64 loops and oneDNN + AVX-512 never round alike in every loss of a run: identical losses would
  // mean --backend ref was ignored and both runs computed on cpu.
  EXPECT_FALSE(all_bitwise_equal) << "the ref run's losses are bit-identical to the cpu run's";
  // The resolved recipe records the choice (runtime.backend), and the default is cpu.
  EXPECT_NE(test::read_bytes(path("ref") + "/config.toml").find("backend = 'ref'"), std::string::npos);
  EXPECT_NE(test::read_bytes(path("cpu") + "/config.toml").find("backend = 'cpu'"), std::string::npos);
}

TEST_F(BackendCli, RecipeKeySelectsTheBackendLikeTheFlag) {
  ASSERT_EQ(train("flag", "--backend ref").code, 0);
  ASSERT_EQ(train("key", "--set runtime.backend=ref").code, 0);
  EXPECT_EQ(losses("flag"), losses("key"));  // same backend, same inputs: bit-identical
}

TEST_F(BackendCli, UnknownBackendIsRefusedNamingTheFlagAndTheRegisteredNames) {
  const test::CliResult flag = train("bad_flag", "--backend cdua");
  EXPECT_EQ(flag.code, 1) << flag.out;
  EXPECT_NE(flag.out.find("--backend: runtime.backend: unknown backend 'cdua' (registered backends: "), std::string::npos)
      << flag.out;
  EXPECT_NE(flag.out.find("cpu"), std::string::npos) << flag.out;
  EXPECT_NE(flag.out.find("ref"), std::string::npos) << flag.out;
  EXPECT_NE(flag.out.find("hint: "), std::string::npos) << flag.out;
  const test::CliResult key = train("bad_key", "--set runtime.backend=cdua");
  EXPECT_EQ(key.code, 1) << key.out;
  EXPECT_NE(key.out.find("--set runtime.backend=cdua: runtime.backend: unknown backend 'cdua'"), std::string::npos)
      << key.out;
  EXPECT_FALSE(std::filesystem::exists(path("bad_flag") + "/metrics.jsonl"));  // refused before training
}

TEST_F(BackendCli, GenerateOnRefDrawsTheSameGreedyTokensAsCpu) {
  const std::string args = "generate --preset tiny --prompt-ids 1,2,3 --max-tokens 6 --temperature 0 --json";
  const test::CliResult cpu = test::run_lmtrain(args, false);
  const test::CliResult ref = test::run_lmtrain(args + " --backend ref", false);
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  ASSERT_EQ(ref.code, 0) << ref.out;
  const auto ids_cpu = nlohmann::json::parse(cpu.out)["ids"], ids_ref = nlohmann::json::parse(ref.out)["ids"];
  EXPECT_EQ(ids_cpu.size(), 6u);
  EXPECT_EQ(ids_cpu, ids_ref);
  const test::CliResult bad = test::run_lmtrain(args + " --backend cdua", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--backend: unknown backend 'cdua' (registered backends: "), std::string::npos) << bad.out;
}

TEST_F(BackendCli, EvalAndBenchmarksTakeTheFlag) {
  const test::CliResult val = test::run_lmtrain(
      "eval --preset tiny --task val --data " + path("data") + " --limit 1 --micro-batch 1 --seq-len 16 --backend ref --json", true);
  EXPECT_EQ(val.code, 0) << val.out;
  const test::CliResult mm = test::run_lmtrain("bench matmul --m 8 --k 8 --n 8 --dtype fp32 --iters 1 --warmup 0 --backend ref --json", false);
  ASSERT_EQ(mm.code, 0) << mm.out;
  EXPECT_EQ(nlohmann::json::parse(mm.out)["backend"], "ref");
  const test::CliResult at = test::run_lmtrain(
      "bench attention --micro-batch 1 --heads 2 --seq-len 8 --head-dim 4 --attention naive --backend ref --iters 1 --warmup 0 --json", false);
  ASSERT_EQ(at.code, 0) << at.out;
  const auto j = nlohmann::json::parse(at.out);
  EXPECT_EQ(j["backend"], "ref");
  EXPECT_EQ(j["attention"], "naive");
  // --backend used to choose flash or naive here; that is --attention now, and the old use is refused.
  const test::CliResult old = test::run_lmtrain("bench attention --micro-batch 1 --heads 2 --seq-len 8 --head-dim 4 --backend flash", true);
  EXPECT_EQ(old.code, 1);
  EXPECT_NE(old.out.find("--backend 'flash' is not a kernel backend (registered backends: "), std::string::npos) << old.out;
  EXPECT_NE(old.out.find("hint: flash or naive attention is chosen with --attention flash"), std::string::npos) << old.out;
  const test::CliResult model = test::run_lmtrain("bench model --preset tiny --micro-batch 1 --seq-len 8 --iters 1 --warmup 0 --backend ref --json", false);
  ASSERT_EQ(model.code, 0) << model.out;
  EXPECT_EQ(nlohmann::json::parse(model.out)["backend"], "ref");
}

// A build with the CUDA backend on a machine without a GPU (every CI machine): `--backend cuda` is a
// clean error naming the reason, with a hint, exit 1, and no run directory written. (Where a GPU is
// visible, scripts/gpu_check.sh runs the real thing; where the backend is not built, the name is
// unknown, which the test above covers.)
TEST_F(BackendCli, CudaWithoutAGpuIsRefusedWithTheReason) {
  const test::CliResult names = test::run_lmtrain("bench train --backend no-such-backend", true);
  if (names.out.find("cuda") == std::string::npos) GTEST_SKIP() << "this build has no cuda backend";
  const test::CliResult r = train("gpu", "--backend cuda");
  if (r.code == 0) GTEST_SKIP() << "a GPU is visible here: scripts/gpu_check.sh covers it";
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no CUDA device is visible"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hint:"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(path("gpu") + "/metrics.jsonl"));
}

}  // namespace
}  // namespace lmt
