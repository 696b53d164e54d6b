// Golden tests against a real pretrained model: stories260K (karpathy/tinyllamas, Llama with GQA)
// in Hugging Face form, with reference logits computed in f64 by two independent implementations
// (../shared/data/models/stories260K/reference.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/kernels/registry.h"
#include "lmt/model/hf_checkpoint.h"
#include "lmt/model/transformer.h"

namespace lmt {
namespace {

const std::string kDir = std::string(LMT_SHARED_DATA) + "/models/stories260K";

class Stories260K : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kDir + "/reference.json"))
      GTEST_SKIP() << "shared test data not found at " << kDir << " (../shared/data is absent)";
    std::ifstream in(kDir + "/reference.json");
    reference_ = nlohmann::json::parse(in);
    auto config = model::config_from_hf(kDir + "/hf/config.json");
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = *config;
  }

  std::unique_ptr<model::Transformer> load(kernels::Backend& backend) {
    auto m = std::make_unique<model::Transformer>(config_, backend);
    Status s = model::load_hf_weights(kDir + "/hf/model.safetensors", m->layout(), m->params().as<float>());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return m;
  }

  nlohmann::json reference_;
  model::ModelConfig config_;
};

TEST_F(Stories260K, ConfigMatchesTheCheckpoint) {
  EXPECT_EQ(config_.n_layers, 5);
  EXPECT_EQ(config_.d_model, 64);
  EXPECT_EQ(config_.n_heads, 8);
  EXPECT_EQ(config_.n_kv_heads, 4);
  EXPECT_EQ(config_.ffn_hidden, 172);
  EXPECT_TRUE(config_.tied_embeddings);
}

// The 32 reference input ids give the reference logits within 1e-4 (cpu and ref backends, f32).
TEST_F(Stories260K, LogitsMatchReference) {
  const std::vector<int32_t> ids = reference_["input_ids"].get<std::vector<int32_t>>();
  const auto& want = reference_["logits"];
  const int64_t T = static_cast<int64_t>(ids.size()), V = config_.vocab_size;
  for (kernels::Backend* be : {&kernels::cpu_backend(), &kernels::ref_backend()}) {
    auto m = load(*be);
    model::RunOptions o;
    o.compute = DType::kF32;
    m->prepare(1, T, o);
    Tensor logits({T, V}, DType::kF32);
    m->logits(ids.data(), nullptr, logits);
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::abs(logits.as<float>()[t * V + v] - want[t][v].get<double>()));
    EXPECT_LT(worst, 1e-4) << be->name() << " backend: max |logit - reference|";
  }
}

// Greedy decoding from BOS reproduces the reference continuation (which equals llama2.c's run.c
// output at temperature 0).
TEST_F(Stories260K, GreedyFromBosReproducesReference) {
  const std::vector<int32_t> want = reference_["greedy_from_bos"].get<std::vector<int32_t>>();
  const int64_t T = static_cast<int64_t>(want.size()), V = config_.vocab_size;
  auto m = load(kernels::cpu_backend());
  model::RunOptions o;
  o.compute = DType::kF32;
  m->prepare(1, T, o);
  std::vector<int32_t> seq(T, 0);
  seq[0] = want[0];  // BOS
  Tensor logits({T, V}, DType::kF32);
  for (int64_t t = 0; t + 1 < T; ++t) {
    m->logits(seq.data(), nullptr, logits);  // causal: positions > t do not affect position t
    const float* row = logits.as<float>() + t * V;
    seq[t + 1] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    ASSERT_EQ(seq[t + 1], want[t + 1]) << "first divergence at position " << t + 1;
  }
}

TEST_F(Stories260K, ConfigThatDisagreesWithWeightsNamesTheTensor) {
  model::ModelConfig wrong = config_;
  wrong.n_kv_heads = 8;
  model::ParamLayout layout(wrong);
  std::vector<float> params(layout.total_numel());
  Status s = model::load_hf_weights(kDir + "/hf/model.safetensors", layout, params.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'model.layers.0.self_attn.k_proj.weight' has shape [32,64]"), std::string::npos)
      << s.ToString();
  EXPECT_FALSE(s.hint().empty());

  model::ModelConfig fewer = config_;
  fewer.n_layers = 4;
  model::ParamLayout short_layout(fewer);
  params.assign(short_layout.total_numel(), 0.0f);
  s = model::load_hf_weights(kDir + "/hf/model.safetensors", short_layout, params.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.4."), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace lmt
