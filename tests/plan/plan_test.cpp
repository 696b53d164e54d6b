// make_plan end to end (library level): the worked examples through the whole pipeline, the checks
// it flags, the JSON contract and the errors users see.
#include "lmt/plan/plan.h"

#include <gtest/gtest.h>

#include "test_models.h"

namespace lmt::plan {
namespace {

PlanInputs small_on_a100() {
  PlanInputs in;
  in.params = 360e6;
  in.hardware = "a100-80gb";
  in.hours = 30;
  in.mfu = 0.4;
  return in;
}

TEST(Plan, A360MModelOnOneA100For30Hours) {
  auto r = make_plan(small_on_a100());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flops_basis, "6n");  // no shape: 6N
  ASSERT_TRUE(r->tokens_feasible.has_value());
  EXPECT_NEAR(*r->tokens_feasible, 6.24e9, 1e3);
  EXPECT_DOUBLE_EQ(r->hours, 30);
  EXPECT_DOUBLE_EQ(r->compute_budget_flops, 312e12 * 0.4 * 30 * 3600);
  EXPECT_NEAR(r->total_flops, 6 * 360e6 * 6.24e9, 1e12);
  EXPECT_FALSE(r->cost.has_value());
  EXPECT_FALSE(r->warnings.empty());  // activations unknown with --params
}

TEST(Plan, Llama2_7BTokenTargetGives8_40e22Flops) {
  PlanInputs in;
  in.params = 7e9;  // the nominal size; see compute_test.cpp
  in.hardware = "a100-80gb";
  in.devices = 2048;
  in.tokens = 2e12;
  in.price = 2.0;
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->total_flops, 8.4e22);
  ASSERT_TRUE(r->hours_to_target.has_value());
  // 8.4e22 / (2048 × 312e12 × 0.4 default MFU) s.
  EXPECT_NEAR(*r->hours_to_target, 8.4e22 / (2048 * 312e12 * 0.4) / 3600, 1e-6);
  EXPECT_NEAR(*r->cost, 2048 * *r->hours_to_target * 2.0, 1e-3);
  EXPECT_EQ(r->mfu_source, "default");
}

TEST(Plan, ClaimedThroughputAbove100PercentMfuIsFlagged) {
  PlanInputs in;
  in.model = *model::preset("llama3.2-1b");
  in.hardware = "h100-sxm";
  in.devices = 8;
  in.throughput = 2e7;  // 20M tokens/s on 8 H100s for a 1.2B model: ~20x too fast
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->implied_mfu.has_value());
  EXPECT_GT(*r->implied_mfu, 1.0);
  EXPECT_TRUE(r->implied_mfu_impossible);
  EXPECT_NE(r->warnings.front().find("impossible"), std::string::npos);
  EXPECT_EQ(to_json(*r)["implied_mfu_impossible"], true);

  in.throughput = 2e5;  // plausible: 2e5 × ~9e9 / 7.9e15 ≈ 23%
  auto ok = make_plan(in);
  EXPECT_LT(*ok->implied_mfu, 0.5);
  EXPECT_FALSE(ok->implied_mfu_impossible);
}

TEST(Plan, TimeBudgetTheThroughputCannotMeetIsFlagged) {
  PlanInputs in = small_on_a100();
  in.tokens = 20e9;  // 3.2× what 30 h give at 40%
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->target_within_budget.has_value());
  EXPECT_FALSE(*r->target_within_budget);
  EXPECT_NEAR(*r->required_mfu, 0.4 * 20e9 / 6.24e9, 1e-9);
  in.tokens = 5e9;
  EXPECT_TRUE(*make_plan(in)->target_within_budget);
}

TEST(Plan, JsonHasTheDocumentedKeys) {
  PlanInputs in;
  in.model = *model::preset("llama3.2-1b");
  in.hardware = "h100-sxm";
  in.devices = 8;
  in.hours = 24;
  in.mfu = 0.4;
  in.price = 3;
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json j = to_json(*r);
  for (const char* key : {"params", "flops_per_token_6n", "flops_per_token_detailed", "total_flops",
                          "chinchilla_params", "chinchilla_tokens", "tokens_feasible", "hours", "cost",
                          "memory_per_device_bytes", "fits", "parallelism", "implied_mfu"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["params"].get<double>(), 1'235'814'400.0);
  EXPECT_GT(j["flops_per_token_detailed"].get<double>(), j["flops_per_token_6n"].get<double>());
  for (const char* key : {"weights", "grads", "master_fp32", "adam_m", "adam_v", "activations", "total"})
    EXPECT_TRUE(j["memory_per_device_bytes"].contains(key)) << key;
  EXPECT_TRUE(j["implied_mfu"].is_null());
  EXPECT_DOUBLE_EQ(j["cost"].get<double>(), 8 * 24 * 3.0);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_FALSE(j["parallelism"].empty());
  EXPECT_EQ(j["memory_by_zero"].size(), 4u);
  EXPECT_FALSE(format_report(*r).empty());
}

TEST(Plan, RequestedLayoutIsUsedOrExplained) {
  PlanInputs in;
  in.model = testing::llama3_8b();
  in.hardware = "h100-sxm";
  in.devices = 32;
  in.devices_per_node = 8;
  in.tp = 4;
  in.pp = 2;
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->layout.dp, 4);
  EXPECT_FALSE(r->layout_searched);
  in.tp = 3;
  in.pp = 1;
  auto bad = make_plan(in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TP 3"), std::string::npos) << bad.status().ToString();
}

TEST(Plan, UnknownHardwareListsTheValidNames) {
  PlanInputs in = small_on_a100();
  in.hardware = "a100";
  auto r = make_plan(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'a100'"), std::string::npos);
  for (const char* n : {"v100", "a100-40gb", "a100-80gb", "a6000", "h100-sxm", "h100-pcie", "h200", "b200", "cpu"})
    EXPECT_NE(r.status().hint().find(n), std::string::npos) << n;
}

TEST(Plan, BadValuesAreErrorsWithHints) {
  auto expect_bad = [](PlanInputs in, const char* what) {
    auto r = make_plan(in);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
    EXPECT_FALSE(r.status().hint().empty()) << what;
  };
  PlanInputs in = small_on_a100();
  in.mfu = 1.5;
  expect_bad(in, "--mfu");
  in = small_on_a100();
  in.zero_stage = 4;
  expect_bad(in, "--zero 4");
  in = small_on_a100();
  in.precision = "fp8";  // A100 has no fp8 tensor cores
  expect_bad(in, "fp8");
  in = small_on_a100();
  in.params = 0;
  expect_bad(in, "no model");
  in = small_on_a100();
  in.devices = 12;
  in.devices_per_node = 8;
  expect_bad(in, "whole nodes");
  // Upper limits (issue #20: --devices 1e12 once searched for minutes).
  in = small_on_a100();
  in.devices = 1'000'000'000'000;
  expect_bad(in, "--devices 1000000000000 is out of range");
  in = small_on_a100();
  in.micro_batch = int64_t{1} << 40;
  expect_bad(in, "--micro-batch");
  in = small_on_a100();
  in.global_batch = int64_t{1} << 50;
  expect_bad(in, "--global-batch");
  in = small_on_a100();
  in.seq_len = int64_t{1} << 40;
  expect_bad(in, "--seq-len");
  in = small_on_a100();
  in.devices_per_node = int64_t{1} << 40;
  expect_bad(in, "--devices-per-node");
  in = small_on_a100();
  in.tp = 1000;
  expect_bad(in, "--tp and --pp must be at most --devices");
}

TEST(Plan, CpuPlanUsesTheMachinesMeasuredPeak) {
  PlanInputs in;
  in.model = *model::preset("tiny");
  in.hardware = "cpu";
  in.hours = 1;
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->peak_flops_per_device, 0);
  EXPECT_EQ(r->inputs.devices_per_node, 1);
  EXPECT_TRUE(r->layout.fits);
  EXPECT_EQ(r->layout.memory.runtime_overhead, 0);
}

}  // namespace
}  // namespace lmt::plan
