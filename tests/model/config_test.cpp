#include "lmt/model/config.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace lmt::model
