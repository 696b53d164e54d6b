// Planning MoE models: memory counts every expert (split over EP), FLOPs and time count the active
// ones. Numbers are tiny-moe's, computed by hand: 8,136,960 parameters, of which 4 layers × 8
// experts × 3·256·256 = 6,291,456 are routed experts and 1,845,504 the rest; 3,418,368 active.
#include <gtest/gtest.h>

#include "lmt/plan/memory.h"
#include "lmt/plan/parallelism.h"
#include "lmt/plan/plan.h"

namespace lmt::plan {
namespace {

model::ModelConfig tiny_moe() { return *model::preset("tiny-moe"); }

MemoryInputs moe_inputs(int zero, int64_t dp, int64_t ep) {
  MemoryInputs in;
  in.config = tiny_moe();
  in.seq_len = 256;
  in.zero_stage = zero;
  in.dp = dp;
  in.ep = ep;
  in.fragmentation = 0;
  return in;
}

TEST(MoeMemory, StatesCountEveryExpertAndEpSplitsThem) {
  EXPECT_DOUBLE_EQ(routed_expert_params(tiny_moe()), 6'291'456);
  EXPECT_DOUBLE_EQ(routed_expert_params(*model::preset("tiny")), 0);
  const MemoryBreakdown one = estimate_memory(moe_inputs(0, 4, 1));
  EXPECT_DOUBLE_EQ(one.stage_params, 8'136'960);
  EXPECT_DOUBLE_EQ(one.model_states(), 16.0 * 8'136'960);
  // EP 2: each rank holds half of the routed experts.
  const MemoryBreakdown ep2 = estimate_memory(moe_inputs(0, 4, 2));
  EXPECT_DOUBLE_EQ(ep2.expert_params, 3'145'728);
  EXPECT_DOUBLE_EQ(ep2.stage_params, 1'845'504 + 3'145'728);
  EXPECT_DOUBLE_EQ(ep2.weights, 2.0 * (1'845'504 + 3'145'728));
  // ZeRO-1 over DP 4: the rest's optimizer states over 4 ranks, the expert shard's over DP/EP = 2.
  const MemoryBreakdown z1 = estimate_memory(moe_inputs(1, 4, 2));
  EXPECT_DOUBLE_EQ(z1.master, 4.0 * (1'845'504 / 4.0 + 3'145'728 / 2.0));
  EXPECT_DOUBLE_EQ(z1.adam_m + z1.adam_v, 8.0 * (1'845'504 / 4.0 + 3'145'728 / 2.0));
  EXPECT_DOUBLE_EQ(z1.weights, ep2.weights);  // weights stay whole below ZeRO-3
  // EP = DP: every expert lives on one rank only, so ZeRO cannot shard it further.
  const MemoryBreakdown z3 = estimate_memory(moe_inputs(3, 4, 4));
  EXPECT_DOUBLE_EQ(z3.weights, 2.0 * (1'845'504 / 4.0 + 1'572'864));
}

TEST(MoeMemory, LayerActivationsCountTheActiveExperts) {
  // s 256, b 1, 2-byte activations, flash: norms 2·e·sbh, QKV input e·sbh, Q,K e·sb·384, V e·sb·128,
  // out-proj input e·sb·256, FFN input e·sbh; 2 experts × 3 hidden tensors e·sb·256, 2 permuted
  // inputs e·sbh, fp32 router probabilities 4·sb·8; fp32 lse 4·8·sb.
  const double sb = 256, e = 2;
  const double expected = 2 * e * sb * 256 + e * sb * 256 + e * sb * 384 + e * sb * 128 + e * sb * 256 + e * sb * 256 +
                          2 * 3 * e * sb * 256 + 2 * e * sb * 256 + 4 * sb * 8 + 4 * 8 * sb;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(tiny_moe(), 256, 1, true, false, 2), expected);
  EXPECT_DOUBLE_EQ(expected, 1'982'464);
}

PlanInputs plan_inputs() {
  PlanInputs in;
  in.model = tiny_moe();
  in.hardware = "a100-80gb";
  in.devices = 8;
  in.seq_len = 256;
  in.mfu = 0.4;
  in.tokens = 1e9;
  return in;
}

TEST(MoePlan, TimeFromActiveFlopsMemoryFromAllExperts) {
  auto r = make_plan(plan_inputs());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->params, 8'136'960);
  EXPECT_DOUBLE_EQ(r->active_params, 3'418'368);
  EXPECT_DOUBLE_EQ(r->flops_per_token_6n, 6.0 * 3'418'368);
  EXPECT_DOUBLE_EQ(*r->flops_per_token_detailed, 3.0 * 7'880'704);  // model/flops.h, by hand in moe_config_test
  EXPECT_DOUBLE_EQ(r->flops_per_token, *r->flops_per_token_detailed);
  EXPECT_DOUBLE_EQ(r->tokens_per_second, 8 * r->peak_flops_per_device * 0.4 / (3.0 * 7'880'704));
  const nlohmann::json j = to_json(*r);
  EXPECT_EQ(j["active_params"], 3'418'368.0);
  EXPECT_EQ(j["ep"], 1);
  EXPECT_NE(format_report(*r).find("active parameters"), std::string::npos);
}

TEST(MoePlan, ExpertParallelismIsCheckedAndShrinksMemory) {
  PlanInputs in = plan_inputs();
  in.tp = 1;
  in.pp = 1;
  auto ep1 = make_plan(in);
  ASSERT_TRUE(ep1.ok()) << ep1.status().ToString();
  in.ep = 8;
  auto ep8 = make_plan(in);
  ASSERT_TRUE(ep8.ok()) << ep8.status().ToString();
  EXPECT_DOUBLE_EQ(ep1->layout.memory.stage_params - ep8->layout.memory.stage_params, 6'291'456 * (1 - 1.0 / 8));
  EXPECT_DOUBLE_EQ(ep8->flops_per_token, ep1->flops_per_token);  // EP moves experts, not work
  in.ep = 3;
  auto three = make_plan(in);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("--ep 3 does not divide moe.num_experts = 8"), std::string::npos)
      << three.status().ToString();
  in.ep = 4;
  in.tp = 4;  // DP = 2: EP 4 cannot be carved out of it
  auto dp2 = make_plan(in);
  ASSERT_FALSE(dp2.ok());
  EXPECT_NE(dp2.status().message().find("EP 4 does not divide DP 2"), std::string::npos) << dp2.status().ToString();
  PlanInputs dense = plan_inputs();
  dense.model = *model::preset("tiny");
  dense.ep = 2;
  auto d = make_plan(dense);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--ep 2 needs a mixture-of-experts model"), std::string::npos) << d.status().ToString();
}

}  // namespace
}  // namespace lmt::plan
