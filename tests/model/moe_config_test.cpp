// MoE configuration: validation, exact total/active parameter counts of the MoE presets, and
// the qk_norm_full widths. The published counts are those of the issue (#18) and of the models'
// safetensors; tiny-moe's are computed by hand below.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lmt/model/config.h"
#include "lmt/model/config_json.h"
#include "lmt/model/flops.h"

namespace lmt::model {
namespace {

ModelConfig must(const char* name) {
  auto c = preset(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->validate().ok()) << c->validate().ToString();
  return *c;
}

TEST(MoePresets, OlmoeTotalAndActiveMatchThePublishedModel) {
  ModelConfig c = must("olmoe-1b-7b");
  EXPECT_EQ(c.param_count(), 6'919'161'856);
  EXPECT_EQ(c.active_param_count(), 1'282'017'280);
  EXPECT_EQ(c.moe_layer_count(), 16);
  EXPECT_TRUE(c.qk_norm_full);
  EXPECT_FALSE(c.moe.renormalize);
  EXPECT_EQ(c.param_count_estimate(), static_cast<double>(c.param_count()));
  EXPECT_EQ(c.active_param_count_estimate(), static_cast<double>(c.active_param_count()));
}

TEST(MoePresets, Qwen3MoeTotalAndActiveMatchThePublishedModel) {
  ModelConfig c = must("qwen3-30b-a3b");
  EXPECT_EQ(c.param_count(), 30'532'122'624);
  EXPECT_EQ(c.active_param_count(), 3'353'032'704);
  EXPECT_EQ(c.moe_layer_count(), 48);
  EXPECT_FALSE(c.qk_norm_full);
  EXPECT_TRUE(c.moe.renormalize);
}

TEST(MoePresets, TinyMoeCountedByHand) {
  ModelConfig c = must("tiny-moe");
  // C 256, 4 layers, q 8·32 = 256, kv 4·32 = 128. Per layer: norms 2·256, q/k/v 256·(256+2·128),
  // o 256·256, router 8·256, experts 8 · 3·256·256 (SwiGLU, hidden 256).
  const int64_t attn = 2 * 256 + 256 * 512 + 256 * 256;
  const int64_t expert = 3 * 256 * 256;
  const int64_t layer = attn + 8 * 256 + 8 * expert;
  const int64_t rest = 4096 * 256 + 256;  // tied embedding, final norm
  EXPECT_EQ(c.param_count(), 4 * layer + rest);
  EXPECT_EQ(c.param_count(), 8'136'960);
  EXPECT_EQ(c.active_param_count(), 4 * (layer - 6 * expert) + rest);
  EXPECT_EQ(c.active_param_count(), 3'418'368);
}

// The dense peer of `lmtrain bench train --dense-peer`: the MoE model's active parameters minus the
// routers, for top-k alone and with a shared expert; refused for dense models and moe.every > 1.
TEST(MoeConfig, DensePeerHasTheActiveParametersWithoutTheRouters) {
  ModelConfig c = preset("tiny-moe").value();
  for (int64_t shared : {0, 1}) {
    c.moe.shared_experts = shared;
    auto d = dense_peer(c);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->moe.enabled());
    EXPECT_EQ(d->ffn_hidden, (2 + shared) * 256);
    EXPECT_TRUE(d->validate().ok()) << d->validate().ToString();
    const int64_t routers = c.n_layers * c.moe.num_experts * c.d_model;
    EXPECT_EQ(d->param_count(), c.active_param_count() - routers) << "shared experts " << shared;
  }
  EXPECT_EQ(dense_peer(preset("tiny").value()).status().code(), StatusCode::kInvalidArgument);
  c.n_layers = 4;
  c.moe.every = 2;
  EXPECT_EQ(dense_peer(c).status().code(), StatusCode::kInvalidArgument);
}

TEST(MoeConfig, DenseModelsHaveEqualTotalAndActive) {
  for (const auto& name : preset_names()) {
    ModelConfig c = must(name.c_str());
    if (c.moe.enabled()) continue;
    EXPECT_EQ(c.active_param_count(), c.param_count()) << name;
    EXPECT_EQ(c.moe_layer_count(), 0) << name;
  }
}

TEST(MoeConfig, EveryShareAndSharedExpertsAreCounted) {
  ModelConfig c = must("tiny-moe");
  c.moe.every = 2;  // layers 1 and 3 are MoE, 0 and 2 keep the dense ffn_hidden 688
  c.moe.shared_experts = 1;
  ASSERT_TRUE(c.validate().ok()) << c.validate().ToString();
  EXPECT_EQ(c.moe_layer_count(), 2);
  EXPECT_FALSE(c.moe.is_moe_layer(0));
  EXPECT_TRUE(c.moe.is_moe_layer(1));
  const int64_t attn = 2 * 256 + 256 * 512 + 256 * 256, expert = 3 * 256 * 256, dense = 3 * 688 * 256;
  const int64_t rest = 4096 * 256 + 256;
  EXPECT_EQ(c.param_count(), 2 * (attn + dense) + 2 * (attn + 8 * 256 + 9 * expert) + rest);
  EXPECT_EQ(c.active_param_count(), 2 * (attn + dense) + 2 * (attn + 8 * 256 + 3 * expert) + rest);
  // A two-matrix MLP expert has 2·C·H parameters.
  c.ffn = FfnKind::kMlp;
  c.activation = kernels::Activation::kGeluTanh;
  EXPECT_EQ(c.ffn_param_count(256), 2 * 256 * 256);
}

TEST(MoeConfig, QkNormFullWidensTheNormWeights) {
  ModelConfig c = must("tiny");
  c.qk_norm = true;
  const int64_t per_head = c.param_count();
  c.qk_norm_full = true;
  ASSERT_TRUE(c.validate().ok());
  // [HD] + [HD] -> [NH·HD] + [G·HD] per layer: (256 + 128) - 2·32 more in each of 4 layers.
  EXPECT_EQ(c.param_count() - per_head, 4 * (256 + 128 - 64));
  c.qk_norm = false;
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("qk_norm_full is set but qk_norm is not"), std::string::npos) << s.ToString();
}

// Each invalid field is refused by name, with a hint.
TEST(MoeConfig, InvalidFieldsAreRefusedByName) {
  struct Case {
    const char* needle;
    void (*edit)(ModelConfig&);
  };
  const Case cases[] = {
      {"moe.num_experts = -1", [](ModelConfig& c) { c.moe.num_experts = -1; }},
      {"moe.top_k = 0", [](ModelConfig& c) { c.moe.top_k = 0; }},
      {"moe.top_k = 9 is out of range: it must be in [1, 8]", [](ModelConfig& c) { c.moe.top_k = 9; }},
      {"moe.expert_ffn = 0", [](ModelConfig& c) { c.moe.expert_ffn = 0; }},
      {"moe.shared_experts = -2", [](ModelConfig& c) { c.moe.shared_experts = -2; }},
      {"moe.every = 0", [](ModelConfig& c) { c.moe.every = 0; }},
      {"moe.every = 5 is above n_layers = 4", [](ModelConfig& c) { c.moe.every = 5; }},
      {"moe.aux_loss_coef", [](ModelConfig& c) { c.moe.aux_loss_coef = -0.1f; }},
      {"moe.bias_update_rate", [](ModelConfig& c) { c.moe.bias_update_rate = std::nanf(""); }},
      {"moe.router_z_loss", [](ModelConfig& c) { c.moe.router_z_loss = std::numeric_limits<float>::infinity(); }},
      {"moe.capacity_factor = 0.25 must be 0 (dropless) or in [1/top_k, num_experts/top_k] = [0.5, 4]",
       [](ModelConfig& c) { c.moe.capacity_factor = 0.25f; }},
      {"moe.capacity_factor = 5", [](ModelConfig& c) { c.moe.capacity_factor = 5.0f; }},
      {"moe.capacity_factor = nan", [](ModelConfig& c) { c.moe.capacity_factor = std::nanf(""); }},
      {"mlp_bias is set on an MoE model", [](ModelConfig& c) { c.mlp_bias = true; }},
  };
  for (const Case& k : cases) {
    ModelConfig c = must("tiny-moe");
    k.edit(c);
    Status s = c.validate();
    ASSERT_FALSE(s.ok()) << k.needle;
    EXPECT_NE(s.message().find(k.needle), std::string::npos) << s.ToString();
    EXPECT_FALSE(s.hint().empty()) << k.needle;
  }
  ModelConfig ok = must("tiny-moe");
  for (float f : {0.0f, 0.5f, 1.0f, 1.25f, 4.0f}) {
    ok.moe.capacity_factor = f;
    EXPECT_TRUE(ok.validate().ok()) << f << ": " << ok.validate().ToString();
  }
  // A dense model ignores the other moe fields.
  ModelConfig dense = must("tiny");
  dense.moe.top_k = 99;
  EXPECT_TRUE(dense.validate().ok());
}

// FLOPs count the active experts: tiny-moe at T = 256 by hand.
TEST(MoeFlops, BothFormulasCountActiveParameters) {
  ModelConfig c = must("tiny-moe");
  FlopsPerToken f = flops_per_token(c, 256);
  EXPECT_DOUBLE_EQ(f.six_n, 6.0 * 3'418'368);
  // Per layer: q/k/v 2·256·512 + o 2·256·256 = 393216; router 2·256·8 = 4096; 2 experts of
  // 3 matrices 2·256·256 each = 786432. Attention 4·T·q·L = 4·256·256·4; head 2·256·4096.
  EXPECT_DOUBLE_EQ(f.ffn_forward, 4.0 * (4096 + 786432));
  EXPECT_DOUBLE_EQ(f.forward, 4.0 * (393216 + 4096 + 786432) + 4.0 * 256 * 256 * 4 + 2.0 * 256 * 4096);
  EXPECT_DOUBLE_EQ(f.forward, 7'880'704);
  EXPECT_DOUBLE_EQ(f.training, 3 * f.forward);
  // A shared expert adds one expert's FLOPs per MoE layer; every = 2 puts the dense FFN in layers 0, 2.
  c.moe.shared_experts = 1;
  c.moe.every = 2;
  FlopsPerToken g = flops_per_token(c, 256);
  EXPECT_DOUBLE_EQ(g.ffn_forward, 2.0 * (2 * 256 * 688 * 3) + 2.0 * (4096 + 3 * 393216));
  EXPECT_DOUBLE_EQ(g.six_n, 6.0 * static_cast<double>(c.active_param_count()));
  // A dense model is unchanged: 6·N with N = param_count().
  ModelConfig t = must("tiny");
  EXPECT_DOUBLE_EQ(flops_per_token(t, 256).six_n, 6.0 * static_cast<double>(t.param_count()));
}

TEST(MoeConfigJson, EveryFieldRoundTrips) {
  ModelConfig c = must("tiny-moe");
  c.qk_norm = c.qk_norm_full = true;
  c.moe.shared_experts = 2;
  c.moe.every = 2;
  c.moe.renormalize = false;
  c.moe.balance = MoeBalance::kBiasUpdate;
  c.moe.aux_loss_coef = 0.02f;
  c.moe.bias_update_rate = 0.005f;
  c.moe.router_z_loss = 0.001f;
  c.moe.capacity_factor = 1.25f;
  const nlohmann::json j = model_config_to_json(c);
  EXPECT_EQ(j["moe"]["router"], "softmax_topk");
  EXPECT_EQ(j["moe"]["balance"], "bias_update");
  EXPECT_EQ(j["qk_norm_full"], true);
  auto back = model_config_from_json(j, "m.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->moe, c.moe);
  EXPECT_TRUE(back->qk_norm_full);
  // A config.json without the moe object (older checkpoints) is a dense model.
  nlohmann::json dense = model_config_to_json(must("tiny"));
  dense.erase("moe");
  dense.erase("qk_norm_full");
  auto d = model_config_from_json(dense, "old.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->moe.enabled());
  EXPECT_FALSE(d->qk_norm_full);
}

// Recipes set model.moe.KEY, which reaches the JSON as dotted "moe.KEY": it overrides the object.
TEST(MoeConfigJson, DottedKeysOverrideTheObject) {
  nlohmann::json j = model_config_to_json(must("tiny"));
  j["moe.num_experts"] = 4;
  j["moe.top_k"] = 1;
  j["moe.expert_ffn"] = 128;
  j["moe.router"] = "softmax_topk_renorm";
  j["moe.balance"] = "none";
  auto c = model_config_from_json(j, "recipe.toml [model]");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.num_experts, 4);
  EXPECT_EQ(c->moe.top_k, 1);
  EXPECT_EQ(c->moe.expert_ffn, 128);
  EXPECT_TRUE(c->moe.renormalize);
  EXPECT_EQ(c->moe.balance, MoeBalance::kNone);
  j["moe.router"] = "sigmoid";
  auto bad = model_config_from_json(j, "r.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("key 'moe.router' has value \"sigmoid\""), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().hint().find("\"softmax_topk_renorm\""), std::string::npos);
  j.erase("moe.router");
  j["moe.topk"] = 2;
  auto typo = model_config_from_json(j, "r.toml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("unknown key 'moe.topk'"), std::string::npos) << typo.status().ToString();
  j.erase("moe.topk");
  j["moe.top_k"] = 1.5;
  auto type = model_config_from_json(j, "r.toml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("'moe.top_k' must be an integer"), std::string::npos) << type.status().ToString();
  j["moe.top_k"] = 9;  // validated after parsing: names the key
  auto range = model_config_from_json(j, "r.toml");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("moe.top_k = 9 is out of range"), std::string::npos) << range.status().ToString();
}

}  // namespace
}  // namespace lmt::model
