#include "lmt/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lmt/model/activations.h"
#include "lmt/model/config_json.h"
#include "lmt/model/flops.h"

namespace lmt::model {
namespace {

int64_t params_of(const char* name) {
  auto c = preset(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->validate().ok()) << c->validate().ToString();
  return c->param_count();
}

TEST(Presets, ParameterCountsMatchThePublishedModels) {
  EXPECT_EQ(params_of("gpt2-124m"), 124'439'808);
  EXPECT_EQ(params_of("gpt2-350m"), 354'823'168);
  EXPECT_EQ(params_of("llama3.2-1b"), 1'235'814'400);
  EXPECT_EQ(params_of("smollm-360m"), 361'821'120);
  EXPECT_EQ(params_of("smollm2-135m"), 134'515'008);
  EXPECT_EQ(params_of("qwen3-1.8b"), 1'829'195'776);
}

TEST(Presets, ReportModelsHaveTheirShapes) {
  // 18 layers, d 2304, 18 heads: 12·d² + 13·d per layer, plus embeddings and the final norm.
  EXPECT_EQ(params_of("gpt2-1.3b"), 18 * (12 * 2304LL * 2304 + 13 * 2304) + 50257LL * 2304 + 1024LL * 2304 + 2 * 2304);
  auto l2 = preset("llama2-1.3b");
  EXPECT_EQ(l2->n_layers, 18);
  EXPECT_EQ(l2->d_model, 2304);
  EXPECT_EQ(l2->ffn, FfnKind::kGlu);
  EXPECT_EQ(l2->positions, PositionKind::kRope);
  auto l3 = preset("llama3-2.2b");
  EXPECT_EQ(l3->n_layers, 30);
  EXPECT_EQ(l3->n_kv_heads, 8);
  EXPECT_NEAR(static_cast<double>(l3->param_count()), 2.15e9, 0.05e9);
  for (const auto& name : preset_names()) EXPECT_TRUE(preset(name)->validate().ok()) << name;
}

TEST(Presets, UnknownNameListsTheValidOnes) {
  auto c = preset("gpt5");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'gpt5'"), std::string::npos);
  EXPECT_NE(c.status().hint().find("gpt2-124m"), std::string::npos);
  EXPECT_NE(c.status().hint().find("qwen3-1.8b"), std::string::npos);
}

TEST(ModelConfig, ValidationNamesBothHeadCounts) {
  ModelConfig c = *preset("tiny");
  c.n_heads = 6;
  c.n_kv_heads = 4;
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("n_heads = 6 is not divisible by n_kv_heads = 4"), std::string::npos) << s.ToString();
  EXPECT_FALSE(s.hint().empty());
}

TEST(ModelConfig, PaddedVocabAndPartialRotary) {
  ModelConfig c = *preset("gpt2-124m");
  EXPECT_EQ(c.padded_vocab(), 50304);
  ModelConfig t = *preset("tiny");
  t.rotary_fraction = 0.25f;
  EXPECT_EQ(t.rotary_dim(), 8);
  t.nope_every = 4;
  EXPECT_TRUE(t.layer_uses_rope(0));
  EXPECT_FALSE(t.layer_uses_rope(3));
}

TEST(Flops, SixNAndDetailedForGpt2) {
  ModelConfig c = *preset("gpt2-124m");
  FlopsPerToken f = flops_per_token(c, 1024);
  EXPECT_DOUBLE_EQ(f.six_n, 6.0 * 124'439'808);
  // 24·C² per layer (attention 8C², MLP 16C²), 4·T·C attention, 2·C·V head.
  const double C = 768, L = 12, T = 1024, V = 50257;
  EXPECT_DOUBLE_EQ(f.forward, L * (24 * C * C + 4 * T * C) + 2 * C * V);
  EXPECT_DOUBLE_EQ(f.training, 3 * f.forward);
}

TEST(ConfigJson, RoundTripsEveryPreset) {
  for (const auto& name : preset_names()) {
    ModelConfig c = *preset(name);
    auto back = model_config_from_json(model_config_to_json(c), name);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(model_config_to_json(*back), model_config_to_json(c)) << name;
    EXPECT_EQ(back->param_count(), c.param_count()) << name;
  }
}

TEST(ConfigJson, UnknownKeyAndWrongTypeAreNamed) {
  auto typo = model_config_from_json(nlohmann::json{{"n_layer", 4}}, "m.json");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("m.json: unknown key 'n_layer'"), std::string::npos);
  auto type = model_config_from_json(nlohmann::json{{"n_layers", "four"}}, "m.json");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("'n_layers'"), std::string::npos);
}

// Sizes beyond the structural limits are refused by validate(), before any allocation: a model.json
// with n_layers = 1e8 once made `generate` run for minutes while its memory grew.
TEST(ModelConfig, AbsurdSizesAreRefusedByName) {
  nlohmann::json j = model_config_to_json(*preset("tiny"));
  j["n_layers"] = 100000000;
  auto c = model_config_from_json(j, "hostile/model.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("hostile/model.json"), std::string::npos) << c.status().ToString();
  EXPECT_NE(c.status().message().find("n_layers = 100000000 is out of range: it must be in [1, 16384]"), std::string::npos)
      << c.status().ToString();
  for (const char* key : {"vocab_size", "max_seq_len", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden"}) {
    nlohmann::json k = model_config_to_json(*preset("tiny"));
    k[key] = int64_t{1} << 40;
    auto r = model_config_from_json(k, "m.json");
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(std::string(key) + " = "), std::string::npos) << r.status().ToString();
  }
  ModelConfig nan = *preset("tiny");
  nan.rope_theta = std::nanf("");
  EXPECT_FALSE(nan.validate().ok());
  nan = *preset("tiny");
  nan.rotary_fraction = std::nanf("");
  EXPECT_FALSE(nan.validate().ok());
  nan = *preset("tiny");
  nan.init_std = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(nan.validate().ok());
}

TEST(ModelConfig, TotalParametersAreBoundedWithoutOverflow) {
  ModelConfig c = *preset("tiny");
  c.n_layers = ModelLimits::kMaxLayers;
  c.d_model = ModelLimits::kMaxDModel;
  c.ffn_hidden = ModelLimits::kMaxFfnHidden;
  c.n_heads = c.n_kv_heads = 1024;
  c.head_dim = 1024;
  EXPECT_GT(c.param_count_estimate(), 1e17);  // each field in range, the whole far beyond
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameters, more than the limit of 1e13"), std::string::npos) << s.ToString();
  ModelConfig t = *preset("gpt2-124m");
  EXPECT_EQ(static_cast<double>(t.param_count()), t.param_count_estimate());
}

TEST(ModelConfig, MemoryChecksRefuseWhatThisMachineCannotHold) {
  ModelConfig c = *preset("tiny");
  EXPECT_TRUE(model_memory_check(c, 8, 0, "loading tiny").ok());
  c.n_layers = 1024;
  c.d_model = 16384;
  c.n_heads = c.n_kv_heads = 128;
  c.head_dim = 128;
  c.ffn_hidden = 65536;  // 4.4e12 parameters: 35 TB in 8 bytes each
  ASSERT_TRUE(c.validate().ok()) << c.validate().ToString();
  Status s = model_memory_check(c, 8, 0, "loading big/");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("loading big/"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("n_layers 1024"), std::string::npos) << s.ToString();

  // Activations: a batch of 2^20 rows of 2^24 tokens must be refused without overflowing.
  ModelConfig t = *preset("tiny");
  RunOptions run;
  EXPECT_TRUE(activation_memory_check(t, 2, 64, run, 0, "a small batch", "").ok());
  Status a = activation_memory_check(t, int64_t{1} << 20, int64_t{1} << 24, run, 0, "--batch 1048576", "lower --batch");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("--batch 1048576 needs"), std::string::npos) << a.ToString();
  EXPECT_EQ(a.hint(), "lower --batch");
}

}  // namespace
}  // namespace lmt::model
