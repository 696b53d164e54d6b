#include "lmt/config/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

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
    if (c.ok()) EXPECT_TRUE(c->check_complete(e.path().string()).ok()) << e.path();
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

}  // namespace
}  // namespace lmt::config
