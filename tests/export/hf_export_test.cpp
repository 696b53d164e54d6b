// HF export: config.json per family (model::config_to_hf, checked against the importer
// config_from_hf and hand-written values), the refusals, and what export_hf writes or refuses.
#include "lmt/export/hf_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "lmt/io/safetensors.h"
#include "lmt/model/hf_checkpoint.h"

namespace lmt::exporter {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kShared = LMT_SHARED_DATA;

model::ModelConfig small(const std::string& preset) {
  model::ModelConfig c = *model::preset(preset);
  c.vocab_size = 100;
  c.max_seq_len = 32;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = c.family == model::NamingFamily::kGpt2 ? 4 : 2;
  c.head_dim = 4;
  c.ffn_hidden = 40;
  return c;
}

// config_to_hf -> file -> config_from_hf gives back every structural field.
void expect_round_trip(const model::ModelConfig& c, const fs::path& dir) {
  auto j = model::config_to_hf(c);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << j->dump();
  auto back = model::config_from_hf((dir / "config.json").string());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->family, c.family);
  EXPECT_EQ(back->vocab_size, c.vocab_size);
  EXPECT_EQ(back->max_seq_len, c.max_seq_len);
  EXPECT_EQ(back->n_layers, c.n_layers);
  EXPECT_EQ(back->d_model, c.d_model);
  EXPECT_EQ(back->n_heads, c.n_heads);
  EXPECT_EQ(back->n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(back->head_dim, c.head_dim);
  EXPECT_EQ(back->ffn_hidden, c.ffn_hidden);
  EXPECT_EQ(back->norm, c.norm);
  EXPECT_EQ(back->norm_eps, c.norm_eps);
  EXPECT_EQ(back->rope_theta, c.rope_theta);
  EXPECT_EQ(back->qk_norm, c.qk_norm);
  EXPECT_EQ(back->attn_bias, c.attn_bias);
  EXPECT_EQ(back->mlp_bias, c.mlp_bias);
  EXPECT_EQ(back->tied_embeddings, c.tied_embeddings);
}

class HfExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lmt_hf_export_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(HfExportTest, EachFamilyMapsToItsArchitecture) {
  model::ModelConfig llama = small("tiny");
  auto j = model::config_to_hf(llama, "bfloat16");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["model_type"], "llama");
  EXPECT_EQ((*j)["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ((*j)["torch_dtype"], "bfloat16");
  EXPECT_EQ((*j)["dtype"], "bfloat16");
  EXPECT_EQ((*j)["hidden_size"], 16);
  EXPECT_EQ((*j)["num_key_value_heads"], 2);
  EXPECT_EQ((*j)["tie_word_embeddings"], llama.tied_embeddings);
  EXPECT_EQ((*j)["rms_norm_eps"].dump(), "1e-05");  // the shortest decimal of the float
  expect_round_trip(llama, dir_ / "llama");

  model::ModelConfig qwen3 = small("qwen3-1.8b");
  ASSERT_TRUE(qwen3.qk_norm);
  j = model::config_to_hf(qwen3);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["model_type"], "qwen3");
  EXPECT_EQ((*j)["architectures"], json::array({"Qwen3ForCausalLM"}));
  expect_round_trip(qwen3, dir_ / "qwen3");

  model::ModelConfig qwen2 = small("tiny");
  qwen2.attn_bias = true;  // q/k/v biases, none on o: Qwen2
  j = model::config_to_hf(qwen2);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["model_type"], "qwen2");
  EXPECT_EQ((*j)["architectures"], json::array({"Qwen2ForCausalLM"}));
  expect_round_trip(qwen2, dir_ / "qwen2");

  model::ModelConfig llama_bias = small("tiny");
  llama_bias.attn_bias = llama_bias.attn_out_bias = llama_bias.mlp_bias = true;
  j = model::config_to_hf(llama_bias);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["model_type"], "llama");
  EXPECT_EQ((*j)["attention_bias"], true);
  EXPECT_EQ((*j)["mlp_bias"], true);

  model::ModelConfig gpt2 = small("gpt2-124m");
  j = model::config_to_hf(gpt2);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["model_type"], "gpt2");
  EXPECT_EQ((*j)["architectures"], json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ((*j)["n_embd"], 16);
  EXPECT_EQ((*j)["n_inner"], 40);
  EXPECT_EQ((*j)["activation_function"], "gelu_new");
  expect_round_trip(gpt2, dir_ / "gpt2");
}

TEST_F(HfExportTest, LayoutsWithoutAnHfArchitectureAreRefusedNamingTheFeature) {
  struct Case {
    const char* feature;
    void (*edit)(model::ModelConfig&);
    const char* preset;
  };
  const Case cases[] = {
      {"NoPE", [](model::ModelConfig& c) { c.nope_every = 2; }, "tiny"},
      {"partial rotary", [](model::ModelConfig& c) { c.rotary_fraction = 0.5f; }, "tiny"},
      {"LayerNorm in the llama family", [](model::ModelConfig& c) { c.norm = model::NormKind::kLayerNorm; }, "tiny"},
      {"SwiGLU", [](model::ModelConfig& c) { c.ffn = model::FfnKind::kMlp; c.activation = kernels::Activation::kGeluTanh; }, "tiny"},
      {"output without q/k/v biases", [](model::ModelConfig& c) { c.attn_out_bias = true; }, "tiny"},
      {"q/k norms with MLP biases", [](model::ModelConfig& c) { c.mlp_bias = true; }, "qwen3-1.8b"},
      {"activation other than gelu", [](model::ModelConfig& c) { c.activation = kernels::Activation::kRelu; }, "gpt2-124m"},
      {"untied LM head", [](model::ModelConfig& c) { c.tied_embeddings = false; }, "gpt2-124m"},
      {"selection bias", [](model::ModelConfig& c) { c.moe.balance = model::MoeBalance::kBiasUpdate; }, "qwen3-30b-a3b"},
  };
  for (const Case& k : cases) {
    model::ModelConfig c = small(k.preset);
    k.edit(c);
    auto j = model::config_to_hf(c);
    ASSERT_FALSE(j.ok()) << k.feature;
    EXPECT_EQ(j.status().code(), StatusCode::kUnimplemented) << k.feature;
    EXPECT_NE(j.status().message().find(k.feature), std::string::npos) << j.status().ToString();
    // export_hf refuses before writing anything.
    model::ParamLayout layout(c);
    std::vector<float> params(layout.total_numel(), 0.5f);
    ExportModel m{c, &layout, params.data(), "", "test"};
    const fs::path out = dir_ / "refused";
    EXPECT_FALSE(export_hf(m, out.string(), ExportDType::kF32).ok()) << k.feature;
    EXPECT_FALSE(fs::exists(out)) << k.feature;
  }
}

TEST_F(HfExportTest, WritesTheFilesAndRefusesQ8ExistingOutputAndNonJsonTokenizers) {
  model::ModelConfig c = small("tiny");
  c.vocab_size = 151669;  // room for the Qwen3 tokenizer
  c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 1, c.ffn_hidden = 8, c.n_layers = 1;
  model::ParamLayout layout(c);
  std::vector<float> params(layout.total_numel());
  for (size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i % 97) * 0.01f - 0.3f;
  const std::string tok = kShared + "/tokenizers/qwen3/tokenizer.json";
  if (!fs::exists(tok)) GTEST_SKIP() << tok << " not found";
  ExportModel m{c, &layout, params.data(), tok, "test"};

  EXPECT_EQ(export_hf(m, (dir_ / "q8").string(), ExportDType::kQ8_0).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir_ / "q8"));

  const fs::path out = dir_ / "out";
  ASSERT_TRUE(export_hf(m, out.string(), ExportDType::kF32).ok());
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "special_tokens_map.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  EXPECT_EQ(fs::file_size(out / "tokenizer.json"), fs::file_size(tok));
  json tc = json::parse(std::ifstream(out / "tokenizer_config.json"));
  EXPECT_EQ(tc["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");  // Qwen's document separator
  EXPECT_EQ(tc["model_max_length"], 32);
  json cfg = json::parse(std::ifstream(out / "config.json"));
  EXPECT_EQ(cfg["eos_token_id"], 151643);
  // The weights read back exactly (f32), names and shapes as the importer expects.
  std::vector<float> back(layout.total_numel(), 0.0f);
  ASSERT_TRUE(model::load_hf_weights((out / "model.safetensors").string(), layout, back.data()).ok());
  for (const auto& p : layout.params())
    for (int64_t i = 0; i < p.hf_shape.numel(); ++i) ASSERT_EQ(back[p.offset + i], params[p.offset + i]) << p.name;

  // An existing non-empty --out is refused and left as it was.
  const auto before = fs::file_size(out / "config.json");
  Status again = export_hf(m, out.string(), ExportDType::kBf16);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fs::file_size(out / "config.json"), before);
  EXPECT_EQ(json::parse(std::ifstream(out / "config.json"))["dtype"], "float32");

  // GPT-2 directories and tiktoken files are refused, nothing written.
  for (const std::string& t : {kShared + "/tokenizers/gpt2", kShared + "/tokenizers/tiktoken/cl100k_base.tiktoken"}) {
    ExportModel m2 = m;
    m2.tokenizer_path = t;
    Status s = export_hf(m2, (dir_ / "tok").string(), ExportDType::kF32);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << t;
    EXPECT_NE(s.hint().find("--tokenizer none"), std::string::npos) << s.ToString();
    EXPECT_FALSE(fs::exists(dir_ / "tok"));
  }
}

TEST_F(HfExportTest, ShardsRespectTheLimitAndHalfPrecisionRoundsToNearestEven) {
  model::ModelConfig c = small("tiny");
  model::ParamLayout layout(c);
  std::vector<float> params(layout.total_numel(), 0.0f);
  // Hand-computed f16 values: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 and rounds to even (1);
  // 1 + 3·2^-11 rounds up to 1 + 2^-9; 65520 overflows to Inf; 2^-24 is the smallest subnormal.
  const float in[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-24f, -2.5f};
  const float want[] = {1.0f, 1.0f + 0x1p-9f, INFINITY, 0x1p-24f, -2.5f};
  std::copy(std::begin(in), std::end(in), params.begin());  // the embedding's first elements
  fs::create_directories(dir_ / "f16");
  ASSERT_TRUE(model::save_hf_weights_dir((dir_ / "f16").string(), layout, params.data(), "F16", 4096).ok());
  json index = json::parse(std::ifstream(dir_ / "f16" / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 1u);
  EXPECT_FALSE(fs::exists(dir_ / "f16" / "model.safetensors"));
  int64_t total = 0;
  for (const std::string& s : shards) {
    auto f = io::SafetensorsFile::open((dir_ / "f16" / s).string());
    ASSERT_TRUE(f.ok()) << s;
    int64_t bytes = 0;
    for (const auto& t : f->tensors()) {
      EXPECT_EQ(t.dtype, "F16");
      bytes += static_cast<int64_t>(t.size);
    }
    EXPECT_TRUE(bytes <= 4096 || f->tensors().size() == 1) << s << " holds " << bytes << " bytes";
    total += bytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"], total);
  const std::string first = index["weight_map"]["model.embed_tokens.weight"];
  auto f = io::SafetensorsFile::open((dir_ / "f16" / first).string());
  ASSERT_TRUE(f.ok());
  std::vector<float> got(static_cast<size_t>(c.vocab_size * c.d_model));
  ASSERT_TRUE(f->read_f32("model.embed_tokens.weight", got.data(), static_cast<int64_t>(got.size())).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i], want[i]) << i;
  EXPECT_EQ(parse_byte_size("5GB").value(), 5000000000);
  EXPECT_EQ(parse_byte_size("64KiB").value(), 65536);
  EXPECT_FALSE(parse_byte_size("5 GB").ok());
  EXPECT_FALSE(parse_byte_size("0").ok());
}

}  // namespace
}  // namespace lmt::exporter
