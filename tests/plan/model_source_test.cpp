// Model presets and JSON config files for the planner; MFU from a run's metrics.jsonl.
#include "lmt/plan/model_source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace lmt::plan {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("lmt_plan_test_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(ModelSource, PresetByName) {
  auto c = load_model("llama3.2-1b");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->param_count(), 1'235'814'400);
}

TEST(ModelSource, UnknownPresetListsTheValidOnesAndMentionsFiles) {
  auto c = load_model("llama9");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().hint().find("smollm-360m"), std::string::npos);
  EXPECT_NE(c.status().hint().find(".json"), std::string::npos);
}

TEST(ModelSource, JsonConfigFile) {
  const std::string path = write_temp("m.json", R"({"name": "mine", "vocab_size": 32000, "n_layers": 4,
      "d_model": 256, "n_heads": 8, "n_kv_heads": 2, "ffn_hidden": 704, "ffn": "glu",
      "tied_embeddings": false, "max_seq_len": 1024, "qk_norm": true})");
  auto c = load_model(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "mine");
  EXPECT_EQ(c->head_dim, 32);  // d_model / n_heads by default
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->tied_embeddings);
}

TEST(ModelSource, HuggingFaceConfigJson) {
  const std::string path = write_temp("hf.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16,
      "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": true,
      "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16"})");
  auto c = load_model(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->param_count(), 1'235'814'400);  // Llama 3.2 1B
}

TEST(ModelSource, FileErrorsNameTheFileAndKey) {
  auto missing = load_model("/nonexistent/model.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model.json"), std::string::npos);

  const std::string bad_json = write_temp("bad.json", "{\"n_layers\": 4,");
  auto b = load_model(bad_json);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(bad_json), std::string::npos);
  EXPECT_NE(b.status().message().find("not valid JSON"), std::string::npos);

  const std::string typo = write_temp("typo.json", R"({"n_layer": 4})");
  auto t = load_model(typo);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown key 'n_layer'"), std::string::npos);
  EXPECT_NE(t.status().hint().find("n_layers"), std::string::npos);

  const std::string type = write_temp("type.json", R"({"n_layers": "four"})");
  auto ty = load_model(type);
  ASSERT_FALSE(ty.ok());
  EXPECT_NE(ty.status().message().find("'n_layers' must be an integer"), std::string::npos) << ty.status().ToString();

  const std::string invalid = write_temp("invalid.json", R"({"vocab_size": 100, "n_layers": 2, "d_model": 64,
      "n_heads": 6, "n_kv_heads": 4, "ffn_hidden": 128})");
  auto inv = load_model(invalid);
  ASSERT_FALSE(inv.ok());
  EXPECT_NE(inv.status().message().find(invalid), std::string::npos);
  EXPECT_NE(inv.status().message().find("n_heads = 6"), std::string::npos);

  auto toml = load_model("recipe.toml");
  ASSERT_FALSE(toml.ok());
  EXPECT_EQ(toml.status().code(), StatusCode::kUnimplemented);
}

// Found by tests/fuzz/model_config_fuzz: a number too large for a double ("d_model": 2223e222...)
// is nlohmann's out_of_range, not a parse_error, and escaped load_model() uncaught (terminate).
TEST(ModelSource, NumberOverflowIsAnErrorNamingTheFile) {
  const std::string path = write_temp("overflow.json", R"({"n_layers": 2, "d_model": 2223e22222222222222})");
  auto c = load_model(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().ToString();
  EXPECT_NE(c.status().message().find("not valid JSON"), std::string::npos) << c.status().ToString();
  EXPECT_FALSE(c.status().hint().empty());
}

// Found by tests/fuzz/model_config_fuzz (UBSan): an integer key of a Hugging Face config.json
// holding a float beyond int64 ("vocab_size": 1e300) was converted with undefined behaviour, and a
// GPT-2 n_embd near 2^62 overflowed 4 · n_embd (the default n_inner).
TEST(ModelSource, HuggingFaceIntegerKeysRefuseFloatsAndHugeValues) {
  const std::string llama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": )";
  for (const char* bad : {"1e300", "512.5", "-1e30"}) {
    const std::string path = write_temp("hf_float.json", llama + bad + "}");
    auto c = load_model(path);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("'vocab_size' has the wrong type"), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find(path), std::string::npos);
  }
  auto whole = load_model(write_temp("hf_whole.json", llama + "512.0}"));  // an integral float is accepted
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->vocab_size, 512);

  const std::string gpt2 = write_temp("hf_gpt2_huge.json", R"({"model_type": "gpt2", "vocab_size": 100,
      "n_embd": 4611686018427387904, "n_layer": 2, "n_head": 4, "n_positions": 64})");
  auto g = load_model(gpt2);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("d_model"), std::string::npos) << g.status().ToString();
}

TEST(ModelSource, MfuFromMetricsIsTheMedianOfTheSecondHalf) {
  const std::string path = write_temp("metrics.jsonl",
                                      "{\"step\": 1, \"mfu\": 0.05}\n{\"step\": 2, \"mfu\": 0.30}\n"
                                      "{\"event\": \"eval\", \"loss\": 3.1}\n\n"
                                      "{\"step\": 3, \"mfu\": 0.41}\n{\"step\": 4, \"mfu\": 0.40}\n"
                                      "{\"step\": 5, \"mfu\": 0.42}\n{\"step\": 6, \"mfu\": 0.39}\n");
  auto m = mfu_from_metrics(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // Six mfu values; the second half {0.40, 0.42, 0.39} has median 0.40 (warm-up 0.05, 0.30 ignored).
  EXPECT_DOUBLE_EQ(*m, 0.40);
}

TEST(ModelSource, MetricsWithoutMfuIsAnError) {
  const std::string path = write_temp("nomfu.jsonl", "{\"step\": 1, \"loss\": 3}\n");
  auto m = mfu_from_metrics(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no line with a numeric \"mfu\""), std::string::npos);
  EXPECT_FALSE(mfu_from_metrics("/nonexistent/metrics.jsonl").ok());
}

}  // namespace
}  // namespace lmt::plan
