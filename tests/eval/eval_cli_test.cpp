// `lmtrain eval` as a user runs it: JSON keys of a multiple-choice run, the --items-out per-item log
// (its records agree with the file, the labels and the printed accuracies; an existing file is not
// overwritten), a malformed line naming its line number (exit 1 with a hint), a missing --data
// (usage error, exit 2), an unknown task.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

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
  Result r = run("--preset gpt2-124m --tokenizer " + tok + " --task piqa --data " + piqa + " --limit 2 --micro-batch 4 --json", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  for (const char* key : {"task", "items", "acc", "acc_norm_token", "acc_norm_char", "items_per_s"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["items"], 2);
  EXPECT_EQ(j["task"], "piqa");
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EvalCli, ItemsOutLogsEveryItemAndIsNotOverwritten) {
  const std::string piqa = kShared + "/eval/piqa/valid.jsonl", tok = kShared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(piqa) || !std::filesystem::exists(tok)) GTEST_SKIP() << "shared data not found under " << kShared;
  const auto dir = std::filesystem::temp_directory_path() / ("lmt_eval_items_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string items = (dir / "items.jsonl").string();
  const int n = 5;
  const std::string common = "--preset gpt2-124m --tokenizer " + tok + " --task piqa --data " + piqa + " --limit " + std::to_string(n) + " --micro-batch 4";
  Result r = run(common + " --json --items-out " + items, false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto summary = nlohmann::json::parse(r.out);
  const auto recs = read_jsonl(items);
  ASSERT_EQ(recs.size(), static_cast<size_t>(n));
  // The data file and its labels, read here independently.
  std::ifstream data(piqa), labels(kShared + "/eval/piqa/valid-labels.lst");
  int hit = 0, hit_tok = 0, hit_char = 0;
  for (int i = 0; i < n; ++i) {
    std::string line, label;
    std::getline(data, line);
    std::getline(labels, label);
    const auto src = nlohmann::json::parse(line);
    const auto& rec = recs[i];
    EXPECT_EQ(rec["task"], "piqa");
    EXPECT_EQ(rec["index"], i);
    EXPECT_EQ(rec["line"], i + 1);
    EXPECT_EQ(rec["gold"], std::stoi(label)) << "item " << i;
    // lm-eval's piqa template: "Question: {goal}\nAnswer:" and the target delimiter " ".
    EXPECT_EQ(rec["context"], "Question: " + src["goal"].get<std::string>() + "\nAnswer:");
    ASSERT_EQ(rec["choices"].size(), 2u);
    ASSERT_EQ(rec["logprob"].size(), 2u);
    for (int c = 0; c < 2; ++c) {
      const std::string sol = src[c == 0 ? "sol1" : "sol2"].get<std::string>();
      EXPECT_EQ(rec["choices"][c], " " + sol);
      EXPECT_EQ(rec["chars"][c], static_cast<int64_t>(sol.size())) << "PIQA's first items are ASCII: len(sol)";
      EXPECT_GT(rec["tokens"][c].get<int64_t>(), 0);
      EXPECT_LT(rec["logprob"][c].get<double>(), 0.0);
    }
    // The predictions are the argmaxes of the logged scores (ties to the lower index).
    const auto& lp = rec["logprob"];
    auto pick = [&](double d0, double d1) { return lp[1].get<double>() / d1 > lp[0].get<double>() / d0 ? 1 : 0; };
    EXPECT_EQ(rec["pred"], pick(1, 1));
    EXPECT_EQ(rec["pred_norm_token"], pick(rec["tokens"][0].get<double>(), rec["tokens"][1].get<double>()));
    EXPECT_EQ(rec["pred_norm_char"], pick(rec["chars"][0].get<double>(), rec["chars"][1].get<double>()));
    hit += rec["pred"] == rec["gold"];
    hit_tok += rec["pred_norm_token"] == rec["gold"];
    hit_char += rec["pred_norm_char"] == rec["gold"];
  }
  EXPECT_DOUBLE_EQ(summary["acc"].get<double>(), hit / double(n));
  EXPECT_DOUBLE_EQ(summary["acc_norm_token"].get<double>(), hit_tok / double(n));
  EXPECT_DOUBLE_EQ(summary["acc_norm_char"].get<double>(), hit_char / double(n));

  // An existing file is refused before any work and left as it was.
  const std::string before = slurp(items);
  Result again = run(common + " --items-out " + items);
  EXPECT_EQ(again.code, 1) << again.out;
  EXPECT_NE(again.out.find("already exists"), std::string::npos) << again.out;
  EXPECT_EQ(slurp(items), before);
  // A missing directory fails (non-zero, nothing left behind); val has no items.
  EXPECT_NE(run(common + " --items-out " + (dir / "no/such/dir.jsonl").string()).code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "no"));
  Result val = run("--preset tiny --task val --data " + dir.string() + " --items-out " + (dir / "v.jsonl").string());
  EXPECT_EQ(val.code, 1) << val.out;
  EXPECT_NE(val.out.find("--items-out"), std::string::npos) << val.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "v.jsonl"));
  std::filesystem::remove_all(dir);
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
