#include "lmt/config/config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "lmt/model/config.h"

namespace lmt::config {
namespace {

TEST(Config, DefaultsCoverEveryKeyWithADefault) {
  Config c = Config::defaults();
  EXPECT_EQ(c.get_int("train.max_steps"), 1000);
  EXPECT_DOUBLE_EQ(c.get_float("optim.lr"), 6e-4);
  EXPECT_EQ(c.get_string("model.preset"), "tiny");
  EXPECT_FALSE(c.has("data.path"));      // required: no default
  EXPECT_FALSE(c.has("model.n_layers"));  // optional override of the preset
}

TEST(Config, TomlSectionsBecomeDottedKeys) {
  auto c = Config::from_toml_string(R"(
[model]
preset = "gpt2-124m"
n_layers = 4
[train]
max_steps = 50
z_loss = 1e-4
recompute = true
[optim]
lr = 3                      # an integer where a number is expected is fine
[schedule]
drops = [0.5, 0.9]
[data]
path = "data/shards"
mixture = ["more:0.3"]
)", "recipe.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->get_string("model.preset"), "gpt2-124m");
  EXPECT_EQ(c->get_int("model.n_layers"), 4);
  EXPECT_EQ(c->get_int("train.max_steps"), 50);
  EXPECT_DOUBLE_EQ(c->get_float("train.z_loss"), 1e-4);
  EXPECT_TRUE(c->get_bool("train.recompute"));
  EXPECT_DOUBLE_EQ(c->get_float("optim.lr"), 3.0);
  EXPECT_EQ(c->get_float_list("schedule.drops"), (std::vector<double>{0.5, 0.9}));
  EXPECT_EQ(c->get_string_list("data.mixture"), (std::vector<std::string>{"more:0.3"}));
  EXPECT_TRUE(c->check_complete("recipe.toml").ok());
}

TEST(Config, UnknownKeyNamesFileAndClosestKey) {
  auto c = Config::from_toml_string("[optim]\nlrr = 0.1\n", "recipe.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "recipe.toml: unknown key 'optim.lrr'");
  EXPECT_NE(c.status().hint().find("did you mean 'optim.lr'?"), std::string::npos) << c.status().hint();
  auto s = Config::from_toml_string("[trian]\nmax_steps = 3\n", "r.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().hint().find("'train.max_steps'"), std::string::npos) << s.status().hint();
}

TEST(Config, WrongTypeAndSyntaxErrorsNameTheKeyAndPlace) {
  auto c = Config::from_toml_string("[train]\nmax_steps = \"ten\"\n", "r.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("r.toml: key 'train.max_steps' must be an integer"), std::string::npos)
      << c.status().message();
  auto bad = Config::from_toml_string("[train\nmax_steps = 3\n", "r.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("r.toml:1:", 0), 0u) << bad.status().message();
  auto missing = Config::from_toml_file("/nonexistent/recipe.toml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(Config, OverridesParseEachType) {
  Config c = Config::defaults();
  ASSERT_TRUE(c.apply_override("optim.lr=3e-4").ok());
  ASSERT_TRUE(c.apply_override("train.max_steps=20").ok());
  ASSERT_TRUE(c.apply_override("train.recompute=true").ok());
  ASSERT_TRUE(c.apply_override("data.path=/tmp/shards").ok());        // bare string
  ASSERT_TRUE(c.apply_override("model.preset=\"gpt2-124m\"").ok());   // quoted string
  ASSERT_TRUE(c.apply_override("schedule.drops=[0.3]").ok());
  EXPECT_DOUBLE_EQ(c.get_float("optim.lr"), 3e-4);
  EXPECT_EQ(c.get_int("train.max_steps"), 20);
  EXPECT_TRUE(c.get_bool("train.recompute"));
  EXPECT_EQ(c.get_string("data.path"), "/tmp/shards");
  EXPECT_EQ(c.get_string("model.preset"), "gpt2-124m");
  EXPECT_EQ(c.get_float_list("schedule.drops"), std::vector<double>{0.3});
  Status typo = c.apply_override("optim.lrr=1");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.hint().find("'optim.lr'"), std::string::npos);
  Status bad = c.apply_override("train.max_steps=many");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("train.max_steps"), std::string::npos) << bad.message();
  EXPECT_FALSE(c.apply_override("noequals").ok());
}

TEST(Config, RequiredKeyMissingIsNamed) {
  Status s = Config::defaults().check_complete("recipe.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'data.path'"), std::string::npos);
}

TEST(Config, ResolvedTomlReadsBackToTheSameValues) {
  Config c = Config::defaults();
  ASSERT_TRUE(c.apply_override("data.path=with \"quotes\" and \\ slash").ok());
  ASSERT_TRUE(c.apply_override("model.n_layers=3").ok());
  ASSERT_TRUE(c.apply_override("optim.eps=1e-12").ok());
  auto back = Config::from_toml_string(c.to_toml(), "resolved.toml");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << c.to_toml();
  EXPECT_EQ(back->values(), c.values());
}

// Found by tests/fuzz/config_toml_fuzz (30 inputs/s): the "did you mean" suggestion compared the
// whole unknown key with every schema key (quadratic), so a 1 MB `--set` key took seconds to refuse.
TEST(Config, VeryLongUnknownKeyIsRefusedAtOnce) {
  EXPECT_EQ(closest_key("optim.lrr"), "optim.lr");
  Config c = Config::defaults();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c.apply_override("optim.lrr" + std::string(size_t{1} << 20, 'x') + "=1");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown key"), std::string::npos) << s.message().substr(0, 200);
  EXPECT_LT(seconds, 1.0);
}

TEST(Config, SchemaMarkdownDocumentsEveryKey) {
  const std::string md = schema_markdown();
  for (const auto& k : schema()) EXPECT_NE(md.find("`" + k.key + "`"), std::string::npos) << k.key;
}

// Every shipped recipe uses only schema keys with the right types.
TEST(Config, EveryShippedRecipeParses) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(LMT_CONFIGS_DIR)) {
    if (e.path().extension() != ".toml") continue;
    auto c = Config::from_toml_file(e.path().string());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) {
      EXPECT_TRUE(c->check_complete(e.path().string()).ok()) << e.path();
    }
    ++n;
  }
  EXPECT_GE(n, 11);
}

// docs/CONFIG.md embeds the generated key reference; regenerate it with
// `build/bin/lmtrain train --print-keys` when the schema changes.
TEST(Config, DocsConfigMdHasTheCurrentKeyReference) {
  std::ifstream in(LMT_DOCS_DIR "/CONFIG.md");
  std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(doc.find(schema_markdown()), std::string::npos)
      << "docs/CONFIG.md is out of date: paste the output of `lmtrain train --print-keys` into it";
}

// Every value the reliability probe (issue #20) found accepted silently is refused where it is set,
// by --set or by the recipe file, naming the key, the value, the range and the origin.
TEST(ConfigRanges, OutOfRangeValuesAreRefusedWithKeyAndRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.grad_clip=-1", "[0, 1e6]"},
      {"train.grad_clip=nan", "not a finite number"},
      {"train.grad_clip=inf", "not a finite number"},
      {"checkpoint.every=-1", "[0, 1e12]"},
      {"checkpoint.keep=-1", "[0, 1e6]"},
      {"eval.every=-4", "[0, 1e12]"},
      {"eval.batches=-1", "[0, 1e9]"},
      {"stability.spike_zscore=nan", "not a finite number"},
      {"stability.spike_zscore=0", "(0, 1e6]"},
      {"stability.spike_window=-1", "[1, 100000]"},
      {"stability.max_bad_steps=0", "[1, 1e6]"},
      {"model.rope_theta=nan", "not a finite number"},
      {"model.rope_theta=-1", "(0, 1e12]"},
      {"train.seed=-1", ">= 0"},
      {"train.max_steps=1000000000000000000", "[1, 1e12]"},
      {"train.micro_batch=100000000", "[1, 1048576]"},
      {"data.weight=-1", "(0, 1e6]"},
      {"model.n_layers=100000000", "[1, 16384]"},
      {"optim.lr=0", "(0, 100]"},
      {"schedule.drops=[0.5, 1.5]", "(0, 1)"},
  };
  for (const auto& [assignment, range] : cases) {
    Config c = Config::defaults();
    Status s = c.apply_override(assignment);
    ASSERT_FALSE(s.ok()) << assignment;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    const std::string key = assignment.substr(0, assignment.find('='));
    EXPECT_EQ(s.message().rfind("--set " + assignment + ": ", 0), 0u) << s.ToString();  // the origin first
    EXPECT_NE(s.message().find("'" + key + "'"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(range), std::string::npos) << s.ToString();
    EXPECT_NE(s.hint().find(key), std::string::npos) << s.ToString();
  }
  Status list = Config::defaults().apply_override("schedule.drops=[0.5, 1.5]");
  EXPECT_NE(list.message().find("element 1 of key 'schedule.drops' = 1.5"), std::string::npos) << list.ToString();
}

TEST(ConfigRanges, TheRecipeFileIsNamedForItsValues) {
  auto c = Config::from_toml_string("[train]\ngrad_clip = -1.0\n", "recipes/bad.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "recipes/bad.toml: key 'train.grad_clip' = -1 is out of range: it must be in [0, 1e6]");
  auto nan = Config::from_toml_string("[stability]\nspike_zscore = nan\n", "r.toml");
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.status().message(), "r.toml: key 'stability.spike_zscore' = nan is not a finite number");
  // Ends of the ranges are accepted.
  auto edges = Config::from_toml_string(
      "[train]\ngrad_clip = 0\nseed = 0\nmax_steps = 1000000000000\n[checkpoint]\nkeep = 0\n[stability]\nspike_window = 1\n",
      "r.toml");
  EXPECT_TRUE(edges.ok()) << edges.status().ToString();
}

TEST(ConfigRanges, WhereNamesTheFileTheFlagOrTheDefault) {
  auto c = Config::from_toml_string("[optim]\nlr = 0.001\n", "recipe.toml");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->apply_override("train.max_steps=20").ok());
  EXPECT_EQ(c->where("optim.lr"), "recipe.toml");
  EXPECT_EQ(c->where("train.max_steps"), "--set train.max_steps=20");
  EXPECT_EQ(c->where("train.seed"), "recipe.toml (default)");
}

TEST(ConfigRanges, EveryNumericKeyHasARangeAndItsDefaultIsInside) {
  for (const auto& k : schema()) {
    if (k.type != Type::kInt && k.type != Type::kFloat && k.type != Type::kFloatList) continue;
    if (k.key == "train.seed") continue;  // any non-negative seed
    EXPECT_TRUE(k.range.bounded()) << k.key;
    if (k.presence == Presence::kDefault) {
      EXPECT_TRUE(check_value(k, k.default_value, "schema").ok()) << k.key;
    }
  }
}

// The schema's model.* ranges repeat model::ModelLimits (the model's own validation).
TEST(ConfigRanges, ModelKeysAgreeWithTheModelsLimits) {
  using L = model::ModelLimits;
  const std::vector<std::pair<std::string, double>> maxima = {
      {"model.vocab_size", L::kMaxVocab},   {"model.max_seq_len", L::kMaxSeqLen}, {"model.n_layers", L::kMaxLayers},
      {"model.d_model", L::kMaxDModel},     {"model.n_heads", L::kMaxHeads},      {"model.n_kv_heads", L::kMaxHeads},
      {"model.head_dim", L::kMaxHeadDim},   {"model.ffn_hidden", L::kMaxFfnHidden}, {"model.nope_every", L::kMaxLayers},
      {"model.rope_theta", L::kMaxRopeTheta}, {"model.init_std", L::kMaxInitStd},
      {"model.moe.num_experts", L::kMaxExperts}, {"model.moe.top_k", L::kMaxExperts},
      {"model.moe.shared_experts", L::kMaxExperts}, {"model.moe.expert_ffn", L::kMaxFfnHidden},
      {"model.moe.every", L::kMaxLayers}, {"model.moe.aux_loss_coef", L::kMaxMoeCoef},
      {"model.moe.bias_update_rate", L::kMaxMoeCoef}, {"model.moe.router_z_loss", L::kMaxMoeCoef},
      {"model.moe.capacity_factor", L::kMaxExperts},  // num_experts / top_k at most
  };
  for (const auto& [key, max] : maxima) {
    const KeyInfo* k = find_key(key);
    ASSERT_NE(k, nullptr) << key;
    EXPECT_EQ(k->range.max, max) << key;
  }
}

TEST(Config, ADirectoryIsNotARecipe) {
  auto c = Config::from_toml_file(LMT_CONFIGS_DIR);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is a directory"), std::string::npos) << c.status().ToString();
  // Not a regular file but readable (a pipe, as with --config <(...), or a device): read as it comes.
  EXPECT_TRUE(Config::from_toml_file("/dev/null").ok());
}

}  // namespace
}  // namespace lmt::config
