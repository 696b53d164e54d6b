// Resume safety (issue #19): `lmtrain train --resume` continues with the run's saved recipe
// (RUN/config.toml). The README's example — a run started with `--set train.max_steps=4`, resumed
// with `--config recipe.toml --resume` and no `--set` — must not switch to the recipe file's
// max_steps: the differing keys are refused with their saved and given values, and nothing changes;
// `--resume` alone continues as saved; `--allow-changes` applies the changes and records them in
// metrics.jsonl.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"

namespace lmt {
namespace {

class ResumeCli : public test::ScratchDirTest {
 protected:
  void SetUp() override {
    test::ScratchDirTest::SetUp();
    test::write_markov_dataset(path("data"), 64, "resume_cli_test");
    std::ofstream(path("recipe.toml")) << test::tiny_recipe_head(path("data")) <<
                                          "[train]\nseq_len = 32\nmicro_batch = 2\nmax_steps = 1000\n"
                                          "dtype = 'fp32'\nlog_every = 1000\n"
                                          "[eval]\nevery = 0\nbatches = 2\n"
                                          "[checkpoint]\nasync = false\n";
  }
  test::CliResult lmtrain(const std::string& args) const { return test::run_lmtrain(args, true); }
  std::string with_config(const std::string& extra) const {
    return "train --config " + path("recipe.toml") + " --run-dir " + path("run") + " " + extra;
  }
  // The records of RUN/metrics.jsonl with this type.
  std::vector<nlohmann::json> records(const std::string& type) const {
    std::vector<nlohmann::json> out;
    std::ifstream in(path("run/metrics.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j["type"] == type) out.push_back(std::move(j));
    }
    return out;
  }
};

TEST_F(ResumeCli, ResumeWithoutTheOriginalSetKeepsTheSavedMaxSteps) {
  ASSERT_EQ(lmtrain(with_config("--set train.max_steps=4")).code, 0);
  const std::string config = test::read_bytes(path("run/config.toml"));
  const std::string metrics = test::read_bytes(path("run/metrics.jsonl"));
  ASSERT_NE(config.find("max_steps = 4"), std::string::npos) << config;

  // The README's mistake: --config and --resume, without the --set. Refused, listing the key.
  test::CliResult r = lmtrain(with_config("--resume"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("differs from the run's saved recipe " + path("run") + "/config.toml in 1 key(s)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("train.max_steps: saved 4, given 1000 (" + path("recipe.toml") + ")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--allow-changes"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_bytes(path("run/config.toml")), config) << "a refused resume rewrote the saved recipe";
  EXPECT_EQ(test::read_bytes(path("run/metrics.jsonl")), metrics) << "a refused resume touched metrics.jsonl";

  // --resume alone: the saved recipe, max_steps 4; the run is complete, so no step is added.
  r = lmtrain("train --run-dir " + path("run") + " --resume");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("4 steps of"), std::string::npos) << r.out;
  EXPECT_EQ(records("step").size(), 4u);
  EXPECT_EQ(test::read_bytes(path("run/config.toml")), config);
  const auto headers = records("header");
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers[1]["max_steps"], 4);
  EXPECT_EQ(headers[1]["resumed_from_step"], 4);
  EXPECT_TRUE(records("event").empty());
}

TEST_F(ResumeCli, AllowChangesAppliesThemAndRecordsThemInMetrics) {
  ASSERT_EQ(lmtrain(with_config("--set train.max_steps=2")).code, 0);
  // A --set without --config differs from the saved recipe too.
  test::CliResult r = lmtrain("train --run-dir " + path("run") + " --resume --set train.max_steps=3 --set optim.lr=1e-3");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("in 2 key(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optim.lr: saved "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train.max_steps: saved 2, given 3 (--set train.max_steps=3)"), std::string::npos) << r.out;
  EXPECT_EQ(records("step").size(), 2u);

  r = lmtrain("train --run-dir " + path("run") + " --resume --allow-changes --set train.max_steps=3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming with a changed recipe"), std::string::npos) << r.out;
  EXPECT_EQ(records("step").size(), 3u);
  const auto events = records("event");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "config_changed");
  EXPECT_EQ(events[0]["step"], 2);
  EXPECT_EQ(events[0]["changes"],
            (nlohmann::json::array({{{"key", "train.max_steps"}, {"saved", "2"}, {"given", "3"}, {"from", "--set train.max_steps=3"}}})));
  EXPECT_NE(test::read_bytes(path("run/config.toml")).find("max_steps = 3"), std::string::npos);

  // The same recipe again: nothing to allow.
  r = lmtrain("train --run-dir " + path("run") + " --resume");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(ResumeCli, AllowChangesWithoutResumeAndResumeWithoutARecipeAreUsageErrors) {
  test::CliResult r = lmtrain(with_config("--allow-changes"));
  EXPECT_EQ(r.code, 2) << r.out;  // usage errors exit 2 (docs/CLI.md)
  EXPECT_NE(r.out.find("--allow-changes is for --resume"), std::string::npos) << r.out;
  // Nothing saved yet: --config is needed.
  r = lmtrain("train --run-dir " + path("fresh") + " --resume");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--config and --run-dir are required"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lmt
