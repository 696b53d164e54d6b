// The peak FLOP/s that MFU divides by, as a user sees it: `lmtrain bench peak` measures and stores
// it in the cache LMT_PEAK_CACHE names, and `--peak-flops` / runtime.peak_gflops pin it, which the
// mfu of every metrics.jsonl record then shows.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"

namespace {

using lmt::test::CliResult;

CliResult run(const std::string& args) { return lmt::test::run_lmtrain(args, /*with_stderr=*/true); }

// Every JSON line of a file (metrics.jsonl).
std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

class PeakCli : public lmt::test::ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (const char* old = std::getenv("LMT_PEAK_CACHE")) old_cache_ = old, had_cache_ = true;
    cache_ = path("cache/peaks.json");
    ::setenv("LMT_PEAK_CACHE", cache_.c_str(), 1);  // the lmtrain processes this test starts
  }
  void TearDown() override {
    if (had_cache_) ::setenv("LMT_PEAK_CACHE", old_cache_.c_str(), 1);
    else ::unsetenv("LMT_PEAK_CACHE");
    ScratchDirTest::TearDown();
  }
  // The training records (those with an mfu) of a 2-step run of a tiny recipe with `flags`.
  std::vector<nlohmann::json> train(const std::string& flags, const std::string& run_dir) {
    if (!std::filesystem::exists(path("data"))) lmt::test::write_markov_dataset(path("data"), 64, "peak_cli_test");
    const std::string recipe = path("recipe.toml");
    lmt::test::write_bytes(recipe, lmt::test::tiny_recipe_head(path("data")) +
                                       "[train]\nmax_steps = 2\nmicro_batch = 2\nseq_len = 32\ndtype = 'fp32'\n");
    CliResult r = run("train --config " + recipe + " --run-dir " + run_dir + " " + flags);
    EXPECT_EQ(r.code, 0) << r.out;
    std::vector<nlohmann::json> steps;
    for (auto& j : json_lines(run_dir + "/metrics.jsonl"))
      if (j.contains("mfu")) steps.push_back(j);
    EXPECT_EQ(steps.size(), 2u);
    return steps;
  }

  std::string cache_, old_cache_;
  bool had_cache_ = false;
};

TEST_F(PeakCli, BenchPeakJsonPrintsPositivePeaksAndWritesTheCache) {
  CliResult r = run("bench peak --trials 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["bench"], "peak");
  EXPECT_GT(j["fp32_gflops"].get<double>(), 0);
  EXPECT_GT(j["bf16_gflops"].get<double>(), 0);
  EXPECT_GT(j["threads"].get<int>(), 0);
  EXPECT_EQ(j["trials"].get<int>(), 2);
  EXPECT_EQ(j["cache"].get<std::string>(), cache_);
  EXPECT_TRUE(j["cache_written"].get<bool>());
  EXPECT_FALSE(j.contains("previous"));
  // The cache holds exactly what was printed, under the printed key.
  std::ifstream in(cache_);
  const nlohmann::json doc = nlohmann::json::parse(in);
  const nlohmann::json& e = doc["machines"][j["key"].get<std::string>()];
  EXPECT_EQ(e["fp32_gflops"].get<double>(), j["fp32_gflops"].get<double>());
  EXPECT_EQ(e["bf16_gflops"].get<double>(), j["bf16_gflops"].get<double>());
  EXPECT_EQ(e["trials"].get<int>(), 2);
  // A second run re-measures, reports the cached figures and keeps the best of both per unit (a
  // measurement under load never lowers the cached peak) ...
  CliResult again = run("bench peak --trials 1 --json");
  ASSERT_EQ(again.code, 0) << again.out;
  const nlohmann::json k = nlohmann::json::parse(again.out.substr(again.out.find('{')));
  EXPECT_EQ(k["previous"]["fp32_gflops"].get<double>(), j["fp32_gflops"].get<double>());
  for (const char* unit : {"fp32_gflops", "bf16_gflops"})
    EXPECT_EQ(k[unit].get<double>(), std::max(j[unit].get<double>(), k["measured"][unit].get<double>())) << unit;
  // ... unless --reset: then the new measurement is stored as it is.
  CliResult reset = run("bench peak --trials 1 --reset --json");
  ASSERT_EQ(reset.code, 0) << reset.out;
  const nlohmann::json m = nlohmann::json::parse(reset.out.substr(reset.out.find('{')));
  EXPECT_EQ(m["fp32_gflops"].get<double>(), m["measured"]["fp32_gflops"].get<double>());
  std::ifstream in2(cache_);
  EXPECT_EQ(nlohmann::json::parse(in2)["machines"][j["key"].get<std::string>()]["fp32_gflops"].get<double>(),
            m["measured"]["fp32_gflops"].get<double>());
  // The text form names the machine, both peaks and the cache.
  CliResult text = run("bench peak --trials 1");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("machine: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("fp32 "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("bf16 ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(cache_ + " updated"), std::string::npos) << text.out;
}

// --peak-flops X: every step's mfu is (training FLOPs per token · tokens/s) / X, i.e. tflops / X, as
// recorded in metrics.jsonl; runtime.peak_gflops in the recipe does the same.
TEST_F(PeakCli, PeakFlopsIsTheMfuDenominatorOfTraining) {
  for (const auto& [flags, peak_gflops] : std::vector<std::pair<std::string, double>>{
           {"--peak-flops 1234.5", 1234.5}, {"--set runtime.peak_gflops=250", 250.0}}) {
    SCOPED_TRACE(flags);
    const std::string run_dir = path("run" + std::to_string(static_cast<int>(peak_gflops)));
    for (const nlohmann::json& s : train(flags, run_dir)) {
      const double tflops = s["tflops"].get<double>(), mfu = s["mfu"].get<double>();
      ASSERT_GT(tflops, 0);
      EXPECT_NEAR(mfu, tflops * 1e12 / (peak_gflops * 1e9), 1e-12 * mfu) << s.dump();
      EXPECT_NEAR(s["mfu_6n"].get<double>(), s["tflops_6n"].get<double>() * 1e12 / (peak_gflops * 1e9),
                  1e-12 * s["mfu_6n"].get<double>()) << s.dump();
    }
    std::ifstream cfg(run_dir + "/config.toml");
    std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("peak_gflops = " + std::string(peak_gflops == 250.0 ? "250" : "1234.5")), std::string::npos) << text;
  }
}

TEST_F(PeakCli, PeakFlopsMustBePositive) {
  for (const char* cmd : {"train --config x.toml --run-dir r --peak-flops 0", "bench model --preset tiny --peak-flops=-3",
                          "bench train --preset tiny --peak-flops 0"}) {
    CliResult r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--peak-flops"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("hint:"), std::string::npos) << r.out;
  }
}

// bench model divides by --peak-flops too (its JSON reports the peak it used).
TEST_F(PeakCli, BenchModelUsesPeakFlops) {
  CliResult r = run("bench model --preset tiny --micro-batch 1 --seq-len 16 --warmup 0 --iters 1 --dtype fp32 --peak-flops 2000 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_DOUBLE_EQ(j["peak_tflops"].get<double>(), 2.0);
  EXPECT_NEAR(j["mfu"].get<double>(), j["tflops"].get<double>() / 2.0, 1e-12 * j["mfu"].get<double>());
}

}  // namespace
