// `lmtrain eval` as a user runs it: JSON keys of a multiple-choice run, a malformed line naming its
// line number (exit 1 with a hint), a missing --data (usage error, exit 2), an unknown task.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/lmtrain_cli.h"

namespace {

const std::string kShared = LMT_SHARED_DATA;

using Result = lmt::test::CliResult;

Result run(const std::string& args, bool with_stderr = true) { return lmt::test::run_lmtrain("eval " + args, with_stderr); }

TEST(EvalCli, PiqaJsonHasTheDocumentedKeys) {
  const std::string piqa = kShared + "/eval/piqa/valid.jsonl", tok = kShared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(piqa) || !std::filesystem::exists(tok)) GTEST_SKIP() << "shared data not found under " << kShared;
  // Random weights: the point is the contract, not the accuracy.
  Result r = run("--preset gpt2-124m --tokenizer " + tok + " --task piqa --data " + piqa + " --limit 2 --batch 4 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  for (const char* key : {"task", "items", "acc", "acc_norm_token", "acc_norm_char", "items_per_s"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["items"], 2);
  EXPECT_EQ(j["task"], "piqa");
}

TEST(EvalCli, MalformedLineIsNamed) {
  const std::string path = (std::filesystem::temp_directory_path() / "lmt_eval_cli_bad.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"query": "Question: q?", "choices": ["a", "b"], "gold": 0})" << "\n" << "{broken\n";
  }
  Result r = run("--preset tiny --task arc_easy --data " + path);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(path + ":2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hint:"), std::string::npos) << r.out;
}

TEST(EvalCli, UsageAndUnknownTask) {
  EXPECT_EQ(run("--preset tiny --task piqa").code, 2);  // --data is required
  Result r = run("--preset tiny --task mmlu --data x.jsonl");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown eval task 'mmlu'"), std::string::npos) << r.out;
}

}  // namespace
