// RoPE scaling (model/rope.h) against Hugging Face transformers: tiny random Llama models of every
// supported rope_type (tests/model/golden/rope, made by rope_reference.py with transformers 5.24),
// loaded as HF directories. lmtrain's full-forward logits and its KV-cache decode logits must equal
// transformers' within 1e-4 at short positions and past the original context (32 positions; the
// sequence has 96). Also: parsing of rope_parameters / rope_scaling, the writer for the exporter,
// validation, recipe keys and the llama3.2-1b preset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "lmt/eval/decode.h"
#include "lmt/eval/model_dir.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/config_json.h"
#include "lmt/model/hf_checkpoint.h"
#include "lmt/model/rope.h"
#include "lmt/model/transformer.h"

namespace lmt::model {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kGolden = LMT_ROPE_GOLDEN_DIR;
constexpr double kTolerance = 1e-4;

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

// Logits [T, V] of the training forward path.
std::vector<float> full_logits(Transformer& m, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.config().vocab_size;
  RunOptions o;
  o.compute = DType::kF32;
  m.prepare(1, T, o);
  Tensor out({T, V}, DType::kF32);
  m.logits(tokens.data(), nullptr, out);
  return std::vector<float>(out.as<float>(), out.as<float>() + T * V);
}

double max_diff_at(const std::vector<float>& logits, int64_t V, const json& golden, const char* key) {
  double d = 0;
  const auto& positions = golden["positions"];
  for (size_t r = 0; r < positions.size(); ++r) {
    const int64_t p = positions[r].get<int64_t>();
    for (int64_t v = 0; v < V; ++v)
      d = std::max(d, std::abs(static_cast<double>(logits[p * V + v]) - golden[key][r][v].get<double>()));
  }
  return d;
}

struct GoldenCase {
  std::string name;
  RopeScalingType type;
  const char* backend;
};
void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name << "_" << c.backend; }

class RopeGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(RopeGolden, FullForwardAndKvCacheDecodeMatchTransformers) {
  const GoldenCase& g = GetParam();
  const std::string dir = kGolden + "/" + g.name;
  kernels::Backend& be = std::string(g.backend) == "ref" ? kernels::ref_backend() : kernels::cpu_backend();
  auto loaded = eval::load_model_dir(dir, be);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Transformer& m = *loaded->model;
  ASSERT_EQ(m.config().rope_scaling.type, g.type);
  const json golden = read_json(dir + "/golden.json");
  const std::vector<int32_t> tokens = golden["tokens"].get<std::vector<int32_t>>();
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.config().vocab_size;
  ASSERT_LE(T, m.config().max_seq_len);

  // One forward over all 96 tokens (training and eval path).
  const std::vector<float> full = full_logits(m, tokens);
  const double full_diff = max_diff_at(full, V, golden, "full");
  EXPECT_LE(full_diff, kTolerance);

  // generate-style: the prefill in one call, then one token per call.
  const int64_t prefill = golden["prefill"].get<int64_t>();
  eval::Decoder d(m, T, /*prefill_chunk=*/prefill);
  std::vector<float> inc(T * V);
  d.forward(std::span<const int32_t>(tokens.data(), prefill), inc.data());
  for (int64_t t = prefill; t < T; ++t) {
    std::span<const float> last = d.forward(std::span<const int32_t>(&tokens[t], 1));
    std::copy(last.begin(), last.end(), inc.begin() + t * V);
  }
  const double inc_diff = max_diff_at(inc, V, golden, "incremental");
  EXPECT_LE(inc_diff, kTolerance);
  std::printf("%s on %s: max |lmtrain - transformers| full %.3g, KV-cache decode %.3g\n", g.name.c_str(), g.backend,
              full_diff, inc_diff);

  // The comparison is not vacuous: the same weights without the scaling are far off past the
  // original context.
  if (g.type != RopeScalingType::kNone) {
    ModelConfig plain = m.config();
    plain.rope_scaling = RopeScaling{};
    Transformer p(plain, be);
    std::memcpy(p.params().as<float>(), m.params().as<float>(), m.params().bytes());
    EXPECT_GT(max_diff_at(full_logits(p, tokens), V, golden, "full"), 1e-2);
  }
}

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> cases;
  const std::pair<const char*, RopeScalingType> types[] = {
      {"default", RopeScalingType::kNone}, {"linear", RopeScalingType::kLinear},
      {"dynamic", RopeScalingType::kDynamic}, {"yarn", RopeScalingType::kYarn},
      {"yarn_mscale", RopeScalingType::kYarn}, {"llama3", RopeScalingType::kLlama3}};
  for (const char* backend : {"cpu", "ref"})
    for (const auto& [name, type] : types) cases.push_back({name, type, backend});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Transformers, RopeGolden, ::testing::ValuesIn(golden_cases()),
                         [](const auto& info) { return info.param.name + "_" + info.param.backend; });

// The frequency tables themselves against transformers' ROPE_INIT_FUNCTIONS (which compute in f32):
// every golden case (dynamic at seq_len 96) and Llama 3.2 1B's published RoPE (the preset).
TEST(RopeFrequencies, EqualTransformersTables) {
  const json tables = read_json(kGolden + "/inv_freq.json");
  ASSERT_EQ(tables.size(), 7u);
  for (const auto& [name, t] : tables.items()) {
    SCOPED_TRACE(name);
    StatusOr<ModelConfig> c = name == "llama3.2-1b" ? preset(name) : config_from_hf(kGolden + "/" + name + "/config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const kernels::RopeFreqs f = rope_frequencies(*c, t["seq_len"].get<int64_t>());
    const std::vector<double> want = t["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(f.inv_freq.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(f.inv_freq[i], want[i], 1e-6 * want[i]) << "inv_freq[" << i << "]";
    EXPECT_NEAR(f.attention_scaling, t["attention_scaling"].get<double>(), 1e-12);
  }
}

// ---- config.json parsing and writing --------------------------------------------------------------

// Each test gets its own scratch directory (ctest runs the tests of this binary as parallel processes).
class HfConfig : public lmt::test::ScratchDirTest {
 protected:
  // Writes a llama config.json with `extra` merged in and parses it.
  StatusOr<ModelConfig> parse(const json& extra) {
    json j = read_json(kGolden + "/default/config.json");
    j.erase("rope_parameters");
    for (const auto& [k, v] : extra.items()) j[k] = v;
    const fs::path dir = fs::path(dir_) / ("rope_hf_" + std::to_string(counter_++));
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << j.dump();
    return config_from_hf((dir / "config.json").string());
  }
  int counter_ = 0;
};

TEST_F(HfConfig, ParsesTheGoldenConfigsAsTransformersDoes) {
  auto c = config_from_hf(kGolden + "/llama3/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->max_seq_len, 128);

  c = config_from_hf(kGolden + "/yarn_mscale/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c->rope_scaling.beta_slow, 2.0);
  EXPECT_EQ(c->rope_scaling.mscale, 0.707);
  EXPECT_EQ(c->rope_scaling.mscale_all_dim, 0.5);
  EXPECT_FALSE(c->rope_scaling.truncate);
  // HF: attention_factor = get_mscale(4, 0.707) / get_mscale(4, 0.5) with get_mscale = 0.1·m·ln(s) + 1.
  EXPECT_NEAR(rope_frequencies(*c, 1).attention_scaling, (0.1 * 0.707 * std::log(4.0) + 1) / (0.1 * 0.5 * std::log(4.0) + 1),
              1e-15);

  c = config_from_hf(kGolden + "/yarn/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.beta_fast, 32.0);  // HF's defaults
  EXPECT_EQ(c->rope_scaling.beta_slow, 1.0);
  EXPECT_TRUE(c->rope_scaling.truncate);
  EXPECT_NEAR(rope_frequencies(*c, 1).attention_scaling, 0.1 * std::log(4.0) + 1, 1e-15);

  // Dynamic: HF scales past max_position_embeddings (32); lmtrain's context is 32 · factor.
  c = config_from_hf(kGolden + "/dynamic/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32);
  EXPECT_EQ(c->max_seq_len, 128);
  EXPECT_EQ(hf_max_position_embeddings(*c), 32);
  // Up to the threshold the frequencies are the default ones, past it the base grows.
  EXPECT_EQ(rope_frequencies(*c, 32), kernels::RopeFreqs::from_theta(10000.0, 16));
  EXPECT_LT(rope_frequencies(*c, 33).inv_freq[1], rope_frequencies(*c, 32).inv_freq[1]);
}

TEST_F(HfConfig, LegacyRopeScalingWithTypeOrRopeType) {
  auto c = parse({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0);

  // Llama 3.1's published form: rope_scaling with rope_type, rope_theta at the top level.
  c = parse({{"rope_theta", 500000.0},
             {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}}}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);

  // Both present: transformers takes a non-empty rope_scaling (and then the top-level rope_theta,
  // here absent: 10000), an empty one falls back to rope_parameters.
  c = parse({{"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 100.0}}},
             {"rope_scaling", {{"type", "linear"}, {"factor", 3.0}}}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.factor, 3.0);
  EXPECT_EQ(c->rope_theta, 10000.0f);
  c = parse({{"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 100.0}}},
             {"rope_scaling", json::object()}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_EQ(c->rope_theta, 100.0f);
  // llama3 without original_max_position_embeddings: max_position_embeddings (128).
  c = parse({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0}}}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 128);

  // rope_type "default" and a null rope_scaling are plain RoPE.
  c = parse({{"rope_scaling", nullptr}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  c = parse({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 123.0}}}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(c->rope_theta, 123.0f);
}

TEST_F(HfConfig, RefusesUnknownTypesAndMissingKeysByName) {
  auto c = parse({{"rope_parameters", {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}}}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("longrope"), std::string::npos) << c.status().ToString();

  c = parse({{"rope_scaling", {{"type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0}}}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("low_freq_factor"), std::string::npos) << c.status().ToString();

  c = parse({{"rope_parameters", {{"rope_type", "linear"}}}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("factor"), std::string::npos) << c.status().ToString();

  c = parse({{"rope_parameters", {{"rope_type", "linear"}, {"factor", 0.5}}}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("rope_scaling.factor"), std::string::npos) << c.status().ToString();

  c = parse({{"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("full_attention"), std::string::npos) << c.status().ToString();
}

// rope_scaling_to_hf (for the exporter) writes what config_from_hf reads back to the same config.
TEST_F(HfConfig, WriterRoundTripsEveryGoldenConfig) {
  for (const char* name : {"default", "linear", "dynamic", "yarn", "yarn_mscale", "llama3"}) {
    SCOPED_TRACE(name);
    auto c = config_from_hf(kGolden + "/" + name + "/config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const json r = rope_scaling_to_hf(*c);
    EXPECT_EQ(r.is_null(), c->rope_scaling.type == RopeScalingType::kNone);
    if (!r.is_null()) {
      // The keys transformers wrote are all there with the same values.
      const json want = read_json(kGolden + "/" + name + "/config.json")["rope_parameters"];
      for (const auto& [k, v] : want.items()) EXPECT_EQ(r.value(k, json()), v) << k;
    }
    auto back = parse({{"rope_parameters", r}, {"max_position_embeddings", hf_max_position_embeddings(*c)}});
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->rope_scaling, c->rope_scaling);
    EXPECT_EQ(back->max_seq_len, c->max_seq_len);
  }
}

// Llama 3.2 1B's published config.json (meta-llama/Llama-3.2-1B): its import carries the same RoPE
// scaling and shape as the llama3.2-1b preset.
TEST_F(HfConfig, Llama32ImportEqualsThePreset) {
  const json llama32 = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
  std::string scratch = ::testing::TempDir() + "lmt_llama32_XXXXXX";
  ASSERT_NE(::mkdtemp(scratch.data()), nullptr);
  const fs::path dir = fs::path(scratch) / "Llama-3.2-1B";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << llama32.dump();
  auto c = config_from_hf((dir / "config.json").string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ModelConfig p = *preset("llama3.2-1b");
  EXPECT_EQ(c->rope_scaling, p.rope_scaling);
  EXPECT_EQ(c->rope_theta, p.rope_theta);
  EXPECT_EQ(c->max_seq_len, p.max_seq_len);
  EXPECT_EQ(c->param_count(), p.param_count());
  EXPECT_EQ(rope_frequencies(*c, 1), rope_frequencies(p, 1));
  std::error_code ec;
  fs::remove_all(scratch, ec);
}

// ---- lmtrain's own config: validation, JSON/recipe keys, preset ----------------------------------

TEST(RopeScalingConfig, ValidationNamesTheKey) {
  ModelConfig c = *preset("tiny");
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.low_freq_factor = 4;
  c.rope_scaling.high_freq_factor = 1;
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("rope_scaling.high_freq_factor"), std::string::npos) << s.ToString();
  c.rope_scaling.high_freq_factor = 8;
  EXPECT_TRUE(c.validate().ok()) << c.validate().ToString();
  c.rope_scaling.original_max_position_embeddings = 0;
  EXPECT_NE(c.validate().ToString().find("rope_scaling.original_max_position_embeddings"), std::string::npos);

  c = *preset("tiny");
  c.rope_scaling.type = RopeScalingType::kYarn;
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.beta_fast = 0.5;
  EXPECT_NE(c.validate().ToString().find("rope_scaling.beta_fast"), std::string::npos) << c.validate().ToString();

  c = *preset("tiny");
  c.positions = PositionKind::kLearned;
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 2;
  EXPECT_NE(c.validate().ToString().find("rope_scaling.type"), std::string::npos) << c.validate().ToString();
}

TEST(RopeScalingConfig, JsonObjectAndDottedRecipeKeys) {
  ModelConfig c = *preset("llama3.2-1b");
  json j = model_config_to_json(c);
  auto back = model_config_from_json(j, "test.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rope_scaling, c.rope_scaling);

  // model.rope_scaling.KEY in a recipe arrives as "rope_scaling.KEY" and overrides the object.
  j["rope_scaling.type"] = "yarn";
  j["rope_scaling.factor"] = 4.0;
  back = model_config_from_json(j, "test.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(back->rope_scaling.factor, 4.0);

  j["rope_scaling.type"] = "longrope";
  back = model_config_from_json(j, "test.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().ToString().find("longrope"), std::string::npos) << back.status().ToString();

  j.erase("rope_scaling.type");
  j["rope_scaling.factr"] = 4.0;
  back = model_config_from_json(j, "test.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().ToString().find("rope_scaling.factr"), std::string::npos) << back.status().ToString();
}

// Llama 3.2's published config.json: rope_scaling {factor 32, high_freq_factor 4, low_freq_factor 1,
// original_max_position_embeddings 8192, rope_type llama3}, rope_theta 500000.
TEST(RopeScalingConfig, Llama32PresetCarriesItsScaling) {
  ModelConfig c = *preset("llama3.2-1b");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  const kernels::RopeFreqs f = rope_frequencies(c, 1);
  const kernels::RopeFreqs plain = kernels::RopeFreqs::from_theta(500000.0, 64);
  // Wavelength 2π < 8192/4: kept. The lowest frequency (wavelength ~2.9e5 > 8192): divided by 32.
  EXPECT_EQ(f.inv_freq.front(), plain.inv_freq.front());
  EXPECT_DOUBLE_EQ(f.inv_freq.back(), plain.inv_freq.back() / 32);
  EXPECT_EQ(f.attention_scaling, 1.0);
}

}  // namespace
}  // namespace lmt::model
