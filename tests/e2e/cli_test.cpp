// The CLI as a user runs it: help, version, usage errors (exit 2), unimplemented subcommands saying
// so (exit 1), and the benchmark commands' JSON contract.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/lmtrain_cli.h"
#include "common/scoped_env.h"

namespace {

using Result = lmt::test::CliResult;

Result run(const std::string& args, bool with_stderr = false) { return lmt::test::run_lmtrain(args, with_stderr); }

TEST(Cli, HelpListsEverySubcommand) {
  Result r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"plan", "tokenizer", "data", "train", "eval", "generate", "export", "logits", "bench"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
}

TEST(Cli, VersionPrintsNameAndVersion) {
  Result r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("lmtrain ", 0), 0u) << r.out;
}

TEST(Cli, UnknownSubcommandOrOptionIsUsageErrorExit2) {
  Result sub = run("frobnicate", true);
  EXPECT_EQ(sub.code, 2);
  EXPECT_NE(sub.out.find("Usage:"), std::string::npos) << sub.out;
  EXPECT_EQ(run("--no-such-flag").code, 2);
  Result opt = run("bench matmul --no-such-flag", true);
  EXPECT_EQ(opt.code, 2);
  EXPECT_NE(opt.out.find("--no-such-flag"), std::string::npos) << opt.out;
  EXPECT_EQ(run("bench").code, 2);  // a bench needs its kind
}

TEST(Cli, ExportWithoutItsRequiredFlagsIsAUsageError) {
  Result r = run("export", true);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--checkpoint"), std::string::npos) << r.out;
}

TEST(Cli, BadBenchValueIsAnErrorWithHint) {
  Result r = run("bench matmul --dtype int7", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--dtype 'int7'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hint:"), std::string::npos) << r.out;
}

TEST(Cli, BenchMatmulJsonHasTheDocumentedKeys) {
  Result r = run("bench matmul --m 64 --k 48 --n 80 --dtype fp32 --iters 2 --warmup 1 --json");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"seconds", "gflops", "peak_gflops", "fraction_of_peak"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["gflops"].get<double>(), 0.0);
  EXPECT_GT(j["peak_gflops"].get<double>(), 0.0);
}

// --form gram times the symmetric product C[M,M] = A·Aᵀ: N is M whatever --n says, and its GFLOP/s
// count the whole product.
TEST(Cli, BenchMatmulGramIsSquare) {
  Result r = run("bench matmul --form gram --m 200 --k 48 --n 7 --dtype fp32 --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n"].get<int64_t>(), 200);
  EXPECT_NEAR(j["gflops"].get<double>() * j["seconds"].get<double>(), 2.0 * 200 * 48 * 200 * 1e-9, 1e-9);
}

// --cold evicts the caches before each timed repetition, and says so in its JSON.
TEST(Cli, BenchMatmulColdSaysSo) {
  Result r = run("bench matmul --m 64 --k 48 --n 80 --dtype bf16 --iters 2 --warmup 0 --cold --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["cold"].get<bool>());
  EXPECT_GT(j["seconds"].get<double>(), 0.0);
  Result warm = run("bench matmul --m 64 --k 48 --n 80 --dtype bf16 --iters 1 --warmup 0 --json");
  ASSERT_EQ(warm.code, 0) << warm.out;
  EXPECT_FALSE(nlohmann::json::parse(warm.out)["cold"].get<bool>());
}

// bf16 GEMMs run on the unit the measured peaks name (metrics::with_fastest_bf16): widened to f32
// where the CPU's bf16 unit measured slower than its fp32 FMAs (an Intel Xeon without AMX), on
// oneDNN's bf16 matmul elsewhere; LMT_CPU_BF16_GEMM=native|widened overrides, anything else is a
// warning naming it.
TEST(Cli, Bf16GemmsRunOnTheUnitThePeaksName) {
  auto gemms = [](const char* env) {
    const lmt::test::ScopedEnv e("LMT_CPU_BF16_GEMM", env);
    Result r = run("bench matmul --m 32 --k 32 --n 32 --dtype bf16 --iters 1 --warmup 0 --json");
    EXPECT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    return std::make_pair(j["bf16_gemms"].get<std::string>(), j["gemm_isa"].get<std::string>());
  };
  Result peak = run("bench peak --trials 1 --json");  // the unit the (test) peak cache names
  ASSERT_EQ(peak.code, 0) << peak.out;
  const std::string unit = nlohmann::json::parse(peak.out)["bf16_unit"];
  const auto [chosen, isa] = gemms(nullptr);
  const bool bf16_matmul = isa == "avx512_core_bf16" || isa == "avx512_core_amx";  // oneDNN 2.6 has one
  EXPECT_EQ(chosen, bf16_matmul && unit != "fp32" ? "native" : "widened") << isa << ", bf16 unit " << unit;
  EXPECT_EQ(gemms("widened").first, "widened");
  EXPECT_EQ(gemms("native").first, bf16_matmul ? "native" : "widened") << isa;
  const lmt::test::ScopedEnv bad("LMT_CPU_BF16_GEMM", "fast");
  Result r = run("bench matmul --m 32 --k 32 --n 32 --dtype bf16 --iters 1 --warmup 0 --json", /*with_stderr=*/true);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("LMT_CPU_BF16_GEMM='fast' is ignored"), std::string::npos) << r.out;
}

// On a CPU with AMX-BF16, bf16 GEMMs must run on AMX tiles (oneDNN's avx512_core_amx kernels).
TEST(Cli, Bf16GemmsDispatchToAmxWhereTheCpuHasIt) {
  std::ifstream cpuinfo_file("/proc/cpuinfo");
  const std::string cpuinfo((std::istreambuf_iterator<char>(cpuinfo_file)), std::istreambuf_iterator<char>());
  Result r = run("bench matmul --m 256 --k 256 --n 256 --dtype bf16 --iters 1 --warmup 0 --json");
  ASSERT_EQ(r.code, 0);
  const std::string isa = nlohmann::json::parse(r.out)["gemm_isa"];
  if (cpuinfo.find(" amx_bf16") == std::string::npos) {
    EXPECT_NE(isa, "avx512_core_amx");
    GTEST_SKIP() << "this CPU has no AMX-BF16 (oneDNN uses " << isa << "); the AMX dispatch check runs on AMX machines";
  }
  EXPECT_EQ(isa, "avx512_core_amx");
}

TEST(Cli, BenchAttentionJsonHasTheDocumentedKeys) {
  Result r = run("bench attention --micro-batch 1 --heads 4 --kv-heads 2 --seq-len 64 --head-dim 32 --attention flash --iters 1 --warmup 0 --json");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"seconds", "gflops", "peak_gflops", "fraction_of_peak"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["kv_heads"].get<int>(), 2);
}

TEST(Cli, ModelInfoGivesExactParamsAndComponents) {
  Result r = run("model info --preset gpt2-124m --json");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["params"].get<int64_t>(), 124439808);
  int64_t sum = 0;
  for (auto& [k, v] : j["components"].items()) sum += v["params"].get<int64_t>();
  EXPECT_EQ(sum, 124439808);  // the components add up to the whole
  Result text = run("model info --preset qwen3-1.8b");
  EXPECT_NE(text.out.find("1829195776"), std::string::npos) << text.out;
}

// MoE presets (docs/MOE.md): total and active counts, by hand in tests/model/moe_config_test.cpp;
// FLOPs on active parameters; `bench model` runs the MoE model.
TEST(Cli, ModelInfoGivesTotalAndActiveParamsOfMoePresets) {
  Result r = run("model info --preset tiny-moe --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["params"].get<int64_t>(), 8136960);
  EXPECT_EQ(j["active_params"].get<int64_t>(), 3418368);
  EXPECT_DOUBLE_EQ(j["flops_per_token_6n"].get<double>(), 6.0 * 3418368);
  EXPECT_EQ(j["config"]["moe"]["num_experts"], 8);
  EXPECT_EQ(j["config"]["moe"]["top_k"], 2);
  Result dense = run("model info --preset tiny --json");
  auto d = nlohmann::json::parse(dense.out);
  EXPECT_EQ(d["active_params"], d["params"]);
  Result text = run("model info --preset olmoe-1b-7b");
  EXPECT_NE(text.out.find("6919161856 parameters"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("active: 1282017280 parameters per token"), std::string::npos) << text.out;
  Result qwen = run("model info --preset qwen3-30b-a3b");
  EXPECT_NE(qwen.out.find("30532122624 parameters"), std::string::npos) << qwen.out;
  EXPECT_NE(qwen.out.find("active: 3353032704 parameters per token"), std::string::npos) << qwen.out;
  // stdout only: stderr may carry a warning (e.g. a peak measured while other tests run is not cached).
  Result bench = run("bench model --preset tiny-moe --micro-batch 1 --seq-len 32 --iters 1 --warmup 0 --json");
  ASSERT_EQ(bench.code, 0) << bench.out;
  EXPECT_GT(nlohmann::json::parse(bench.out)["tokens_per_s"].get<double>(), 0.0);
}

TEST(Cli, BenchModelJsonHasTokensPerSecondAndMfu) {
  Result r = run("bench model --preset tiny --micro-batch 1 --seq-len 32 --iters 1 --warmup 0 --json");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"tokens_per_s", "mfu", "mfu_6n", "seconds_forward", "seconds_backward", "params"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  Result bad = run("bench model --preset gpt7", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("valid presets:"), std::string::npos) << bad.out;
}

// `bench optim`: both optimizers' step times and their ratio, and the gradient passes beside them; a
// bad --ns-dtype is an error.
TEST(Cli, BenchOptimReportsAdamWMuonAndTheirRatio) {
  Result r = run("bench optim --preset tiny --iters 1 --warmup 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"adamw_seconds", "muon_seconds", "muon_over_adamw", "muon_ns_dtype", "machine",
                          "grad_norm_seconds", "zero_grads_seconds"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"adamw_seconds", "grad_norm_seconds", "zero_grads_seconds"})
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  EXPECT_DOUBLE_EQ(j["muon_over_adamw"].get<double>(),
                   j["muon_seconds"].get<double>() / j["adamw_seconds"].get<double>());
  EXPECT_EQ(j["muon_ns_dtype"], "bf16");
  Result bad = run("bench optim --preset tiny --ns-dtype fp16", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--ns-dtype 'fp16'"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("hint:"), std::string::npos) << bad.out;
}

// `bench decode`: tokens/s against the bandwidth bound, whose arithmetic the JSON must bear out;
// bf16 weights read half the GEMM bytes of fp32.
TEST(Cli, BenchDecodeReportsTokensPerSecondAndTheBandwidthBound) {
  Result f = run("bench decode --preset tiny --sequences 2 --decode-dtype fp32 --steps 2 --warmup 0 --json");
  Result b = run("bench decode --preset tiny --sequences 2 --decode-dtype bf16 --steps 2 --warmup 0 --json");
  ASSERT_EQ(f.code, 0) << f.out;
  ASSERT_EQ(b.code, 0) << b.out;
  auto jf = nlohmann::json::parse(f.out), jb = nlohmann::json::parse(b.out);
  for (const char* key : {"tokens_per_s", "bound_tokens_per_s", "fraction_of_bound", "read_bandwidth_gb_per_s",
                          "weight_bytes_per_step", "kv_bytes_per_step", "machine"})
    EXPECT_TRUE(jb.contains(key)) << key;
  EXPECT_GT(jb["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(jb["read_bandwidth_gb_per_s"].get<double>(), 0.0);
  const double bytes = jb["weight_bytes_per_step"].get<double>() + jb["kv_bytes_per_step"].get<double>();
  EXPECT_NEAR(jb["bound_tokens_per_s"].get<double>(), 2 * jb["read_bandwidth_gb_per_s"].get<double>() * 1e9 / bytes,
              1e-6 * jb["bound_tokens_per_s"].get<double>());
  const double wf = jf["weight_bytes_per_step"].get<double>(), wb = jb["weight_bytes_per_step"].get<double>();
  EXPECT_GT(wb, 0.45 * wf);
  EXPECT_LT(wb, 0.55 * wf);
  Result bad = run("bench decode --preset tiny --sequences 0", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--sequences"), std::string::npos) << bad.out;
}

}  // namespace
