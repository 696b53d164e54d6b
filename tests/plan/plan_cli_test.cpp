// `lmtrain plan` as a user runs it: the JSON contract, the table, and exit codes (2: usage error such
// as an unknown or malformed flag; 1: a value that parses but is wrong, with a hint).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"

namespace {

using Result = lmt::test::CliResult;

Result run(const std::string& args, bool with_stderr = false) { return lmt::test::run_lmtrain("plan " + args, with_stderr); }

TEST(PlanCli, JsonHasTheDocumentedKeys) {
  Result r = run("--preset llama3.2-1b --hardware h100-sxm --devices 8 --hours 24 --mfu 0.4 --price 2.5 "
                 "--throughput 300000 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"params", "flops_per_token_6n", "flops_per_token_detailed", "total_flops",
                          "chinchilla_params", "chinchilla_tokens", "tokens_feasible", "hours", "cost",
                          "memory_per_device_bytes", "fits", "parallelism", "implied_mfu"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["params"].get<double>(), 1235814400.0);
  EXPECT_GT(j["implied_mfu"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["cost"].get<double>(), 8 * 24 * 2.5);
  EXPECT_TRUE(j["memory_per_device_bytes"]["total"].is_number());
}

TEST(PlanCli, EightBillionOn32GpusFromAJsonConfig) {
  Result r = run(std::string("--preset ") + PLAN_TEST_DATA + "/llama3-8b.json --hardware a100-80gb --devices 32 "
                 "--devices-per-node 8 --seq-len 4096 --global-batch 256 --tp 4 --pp 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["params"].get<double>(), 8030261248.0);
  EXPECT_EQ(j["layout"]["dp"], 4);
  EXPECT_EQ(j["layout"]["grad_accum"], 64);
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST(PlanCli, TableIsReadable) {
  Result r = run("--preset smollm-360m --hardware a100-80gb --hours 30 --mfu 0.4");
  ASSERT_EQ(r.code, 0);
  for (const char* s : {"FLOPs/token (6N)", "chinchilla", "memory per device", "parallelism", "fits"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(PlanCli, ImpossibleThroughputIsFlagged) {
  Result r = run("--preset llama3.2-1b --hardware h100-sxm --devices 8 --throughput 2e7", true);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("IMPOSSIBLE"), std::string::npos) << r.out;
}

TEST(PlanCli, BadValuesExit1WithHint) {
  Result hw = run("--params 7e9 --hardware tpu", true);
  EXPECT_EQ(hw.code, 1);
  EXPECT_NE(hw.out.find("h100-sxm"), std::string::npos) << hw.out;
  EXPECT_NE(hw.out.find("hint:"), std::string::npos) << hw.out;
  Result model = run("--preset gpt5 --hardware h100-sxm", true);
  EXPECT_EQ(model.code, 1);
  EXPECT_NE(model.out.find("llama3.2-1b"), std::string::npos) << model.out;
  Result heads = run("--preset gpt2-124m --hardware h100-sxm --devices 8 --tp 8", true);
  EXPECT_EQ(heads.code, 1);
  EXPECT_NE(heads.out.find("does not divide n_heads = 12"), std::string::npos) << heads.out;
  Result layers = run("--preset llama3-2.2b --hardware h100-sxm --devices 8 --pp 4", true);
  EXPECT_EQ(layers.code, 1);
  EXPECT_NE(layers.out.find("does not divide n_layers = 30"), std::string::npos) << layers.out;
  EXPECT_EQ(run("--params 7e9 --hardware h100-sxm --mfu 2").code, 1);
}

TEST(PlanCli, BadFlagsExit2) {
  EXPECT_EQ(run("--params 7e9 --hardware h100-sxm --no-such-flag").code, 2);
  EXPECT_EQ(run("--params 7e9").code, 2);                             // --hardware is required
  EXPECT_EQ(run("--params 7e9 --hardware h100-sxm --devices many").code, 2);
  EXPECT_EQ(run("--params 7e9 --preset tiny --hardware cpu").code, 2);  // mutually exclusive
}

// No plan may take more than a second to refuse an absurd value (issue #20).
TEST(PlanCli, AbsurdDeviceCountsAreRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  Result huge = run("--preset tiny --hardware h100-sxm --devices 1000000000000", true);
  EXPECT_EQ(huge.code, 1);
  EXPECT_NE(huge.out.find("--devices 1000000000000 is out of range"), std::string::npos) << huge.out;
  EXPECT_NE(run("--preset tiny --hardware h100-sxm --devices 1e10").code, 0);
  Result many = run("--preset tiny --hardware h100-sxm --devices 9699690 --devices-per-node 10");  // 2·3·5·…·19
  EXPECT_EQ(many.code, 0);
  EXPECT_NE(many.out.find("more (--json lists all)"), std::string::npos) << many.out;  // the rejections are cut short
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

// plan --emit-config → train --config RECIPE --config LAYOUT: the layout (TP2 on 2 devices) reaches
// the trainer: in one process it is refused (exit 1, naming the world size and `mpirun -np 2`) and
// nothing is written; under `mpirun -np 2` (where found at configure time) it trains with tp = 2.
// The plan never overwrites its file; `-` prints the fragment alone.
TEST(PlanCli, EmitConfigFeedsTrain) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lmt_plan_emit_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string layout = (dir / "layout.toml").string();
  const std::string plan_args = "--preset tiny --hardware cpu --devices 2 --seq-len 32 --micro-batch 2 --global-batch 8 --tp 2 ";
  Result r = run(plan_args + "--emit-config " + layout, true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step-time model"), std::string::npos) << r.out;
  ASSERT_TRUE(fs::exists(layout));
  r = run(plan_args + "--emit-config " + layout, true);  // never overwrites
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("already exists"), std::string::npos) << r.out;
  r = run(plan_args + "--emit-config -");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("# lmtrain plan", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("tp = 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("chinchilla"), std::string::npos) << r.out;  // the fragment only

  lmt::test::write_markov_dataset((dir / "data").string(), 64, "plan_cli_test");
  {
    std::ofstream base(dir / "base.toml");
    base << "[model]\npreset = \"tiny\"\n[data]\npath = \"" << (dir / "data").string()
         << "\"\n[train]\nmax_steps = 1\n";
  }
  const std::string run_dir = (dir / "run").string();
  r = lmt::test::run_lmtrain("train --config " + (dir / "base.toml").string() + " --config " + layout + " --run-dir " +
                                 run_dir,
                             true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("1 · 2 · 1 = 2"), std::string::npos) << r.out;  // dp · tp · pp
  EXPECT_NE(r.out.find("is not the world size 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mpirun -np 2"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(run_dir));
  if (std::string(LMT_MPIRUN).empty()) {
    fs::remove_all(dir);
    GTEST_SKIP() << "mpirun or MPI not found at configure time: the TP2 run itself is not checked";
  }
  const std::string mpi = std::string(LMT_MPIRUN) +
                          " --allow-run-as-root --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism"
                          " none -x OMP_NUM_THREADS=1 -np 2 " LMTRAIN_BIN " train --config " + (dir / "base.toml").string() +
                          " --config " + layout + " --run-dir " + run_dir + " 2>&1";
  FILE* p = popen(mpi.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  std::ifstream metrics(fs::path(run_dir) / "metrics.jsonl");
  std::string header;
  ASSERT_TRUE(std::getline(metrics, header)) << out;
  EXPECT_NE(header.find("\"tp\":2"), std::string::npos) << header;
  fs::remove_all(dir);
}

}  // namespace
