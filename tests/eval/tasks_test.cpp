// Task parsers on the real evaluation files (../shared/data/eval) and on malformed lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lmt/eval/tasks.h"

namespace lmt::eval {
namespace {

const std::string kEval = std::string(LMT_SHARED_DATA) + "/eval";

#define SKIP_WITHOUT_SHARED_DATA()                                                         \
  if (!std::filesystem::exists(kEval)) GTEST_SKIP() << "shared eval data not found at " << kEval

std::vector<McItem> must_parse(const std::string& task, const std::string& rel) {
  auto items = parse_task(task, kEval + "/" + rel);
  EXPECT_TRUE(items.ok()) << items.status().ToString();
  return items.ok() ? *items : std::vector<McItem>{};
}

TEST(Tasks, ArcEasyLlmFoundry) {
  SKIP_WITHOUT_SHARED_DATA();
  auto items = must_parse("arc_easy", "arc/arc_easy.llmfoundry.jsonl");
  ASSERT_EQ(items.size(), 2376u);
  // Line 1: gold 0 "Sunlight is the source ..."; line 2: gold 1 "breathing mask".
  EXPECT_EQ(items[0].context, "Question: Which statement best explains why photosynthesis is the foundation of most food webs?\nAnswer:");
  EXPECT_EQ(items[0].gold, 0);
  EXPECT_EQ(items[0].choices[0], " Sunlight is the source of energy for nearly all ecosystems.");
  EXPECT_EQ(items[1].gold, 1);
  EXPECT_EQ(items[1].choices[1], " breathing mask");
}

TEST(Tasks, ArcChallengeCount) {
  SKIP_WITHOUT_SHARED_DATA();
  EXPECT_EQ(must_parse("arc_challenge", "arc/arc_challenge.llmfoundry.jsonl").size(), 1172u);
}

TEST(Tasks, OpenBookQa) {
  SKIP_WITHOUT_SHARED_DATA();
  auto items = must_parse("openbookqa", "openbookqa/test.jsonl");
  ASSERT_EQ(items.size(), 500u);
  EXPECT_EQ(items[0].gold, 1);  // answerKey "B"
  EXPECT_EQ(items[0].choices[1], " quit eating lunch out");
  EXPECT_EQ(items[1].context, "There is most likely going to be fog around:");  // the harness uses the bare stem
  EXPECT_EQ(items[1].choices.size(), 4u);
}

TEST(Tasks, PiqaWithLabelsFile) {
  SKIP_WITHOUT_SHARED_DATA();
  auto items = must_parse("piqa", "piqa/valid.jsonl");
  ASSERT_EQ(items.size(), 1838u);
  // valid-labels.lst starts 0, 1, 1.
  EXPECT_EQ(items[0].gold, 0);
  EXPECT_EQ(items[1].gold, 1);
  EXPECT_EQ(items[2].gold, 1);
  EXPECT_EQ(items[1].context, "Question: dresser\nAnswer:");
  EXPECT_EQ(items[1].choices[0], " replace drawer with bobby pin ");
}

TEST(Tasks, WinograndePartialScoring) {
  SKIP_WITHOUT_SHARED_DATA();
  auto items = must_parse("winogrande", "winogrande/dev.jsonl");
  ASSERT_EQ(items.size(), 1267u);
  const McItem& it = items[0];  // "Sarah was a much better surgeon than Maria so _ always got the easier cases.", answer 2
  EXPECT_EQ(it.gold, 1);
  EXPECT_EQ(items[1].gold, 0);
  ASSERT_EQ(it.contexts.size(), 2u);
  EXPECT_EQ(it.contexts[0], "Sarah was a much better surgeon than Maria so Sarah");
  EXPECT_EQ(it.contexts[1], "Sarah was a much better surgeon than Maria so Maria");
  EXPECT_EQ(it.choices[0], " always got the easier cases.");
  EXPECT_EQ(it.choices[1], it.choices[0]);
  EXPECT_EQ(it.context_of(1), it.contexts[1]);
}

TEST(Tasks, HellaSwagLlamaCppJsonl) {
  SKIP_WITHOUT_SHARED_DATA();
  auto items = must_parse("hellaswag", "hellaswag/hellaswag_val.llamacpp.jsonl");
  ASSERT_EQ(items.size(), 10042u);
  EXPECT_EQ(items[0].gold, 3);
  EXPECT_EQ(items[0].context, "Roof shingle removal: A man is sitting on a roof. he");
  EXPECT_EQ(items[0].choices[3], " starts pulling up roofing on a roof.");
  int counts[4] = {0, 0, 0, 0};
  for (const auto& it : items) ++counts[it.gold];
  EXPECT_EQ(counts[0], 2515);  // the README's label histogram
  EXPECT_EQ(counts[1], 2485);
  EXPECT_EQ(counts[2], 2584);
  EXPECT_EQ(counts[3], 2458);
}

TEST(Tasks, HellaSwagPreprocessMatchesTheHarness) {
  EXPECT_EQ(hellaswag_preprocess("  A man [title] does it. [step] Then  he  goes. "), "A man. does it. Then he goes.");
  EXPECT_EQ(hellaswag_preprocess("plain text"), "plain text");
}

// Writes `lines` to a temporary file and returns its path.
std::string write_temp(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = (std::filesystem::temp_directory_path() / ("lmt_eval_test_" + name)).string();
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path;
}

// Task files compressed by the real gzip/zstd tools parse to the same items as the plain files,
// with the labels file beside them plain or compressed (FILE-labels.lst[.gz|.zst]).
TEST(Tasks, CompressedFilesParseToTheSameItems) {
  SKIP_WITHOUT_SHARED_DATA();
  if (std::system("command -v gzip >/dev/null && command -v zstd >/dev/null") != 0) GTEST_SKIP() << "gzip/zstd not installed";
  const auto dir = std::filesystem::temp_directory_path() / ("lmt_tasks_compressed_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  auto sh = [&](const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; };
  sh("gzip -c " + kEval + "/piqa/valid.jsonl > " + d + "/valid.jsonl.gz && zstd -q -c " + kEval + "/piqa/valid-labels.lst > " + d + "/valid-labels.lst.zst");
  sh("zstd -q -c " + kEval + "/winogrande/dev.jsonl > " + d + "/dev.jsonl.zst && cp " + kEval + "/winogrande/dev-labels.lst " + d + "/");
  sh("gzip -c " + kEval + "/hellaswag/hellaswag_val.llamacpp.jsonl > " + d + "/hs.jsonl.gz");
  struct Case {
    std::string task, plain, compressed;
  };
  for (const Case& c : {Case{"piqa", "piqa/valid.jsonl", d + "/valid.jsonl.gz"}, Case{"winogrande", "winogrande/dev.jsonl", d + "/dev.jsonl.zst"},
                        Case{"hellaswag", "hellaswag/hellaswag_val.llamacpp.jsonl", d + "/hs.jsonl.gz"}}) {
    const std::vector<McItem> want = must_parse(c.task, c.plain);
    auto got = parse_task(c.task, c.compressed);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want.size()) << c.task;
    ASSERT_GT(want.size(), 1000u);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*got)[i].context, want[i].context);
      EXPECT_EQ((*got)[i].choices, want[i].choices);
      EXPECT_EQ((*got)[i].contexts, want[i].contexts);
      EXPECT_EQ((*got)[i].gold, want[i].gold) << c.task << " item " << i;
      EXPECT_EQ((*got)[i].line, want[i].line);
    }
  }
  // A truncated task file names the file and the offset.
  sh("head -c 5000 " + d + "/hs.jsonl.gz > " + d + "/cut.jsonl.gz");
  auto cut = parse_task("hellaswag", d + "/cut.jsonl.gz");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find(d + "/cut.jsonl.gz: truncated gzip stream"), std::string::npos) << cut.status().ToString();
  std::filesystem::remove_all(dir);
}


TEST(Tasks, MalformedLineNamesFileAndLine) {
  const std::string ok = R"({"query": "Question: q?", "choices": ["a", "b"], "gold": 1})";
  const std::string path = write_temp("arc.jsonl", {ok, "", ok, R"({"query": "Question: q?", "choices": ["a", "b"]})"});
  auto r = parse_task("arc_easy", path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(path + ":4"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("gold"), std::string::npos) << r.status().message();

  const std::string not_json = write_temp("obqa.jsonl", {"{not json"});
  auto r2 = parse_task("openbookqa", not_json);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find(not_json + ":1: not a JSON object"), std::string::npos) << r2.status().message();
  EXPECT_FALSE(r2.status().hint().empty());

  const std::string bad_label = write_temp("hs.jsonl", {R"({"activity_label": "x", "ctx": "c", "endings": ["a", "b"], "label": 7})"});
  auto r3 = parse_task("hellaswag", bad_label);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find(bad_label + ":1"), std::string::npos) << r3.status().message();

  const std::string no_blank = write_temp("wg.jsonl", {R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})"});
  auto r4 = parse_task("winogrande", no_blank);
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find(no_blank + ":1"), std::string::npos) << r4.status().message();
}

TEST(Tasks, PiqaLabelsFileTooShortNamesIt) {
  const std::string row = R"({"goal": "g", "sol1": "a", "sol2": "b"})";
  const std::string path = write_temp("short.jsonl", {row, row});
  const std::string labels = write_temp("short-labels.lst", {"1"});
  auto r = parse_task("piqa", path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(labels + ":2"), std::string::npos) << r.status().message();
}

// Found by tests/fuzz/eval_tasks_fuzz: a labels-file line that is not UTF-8 made the error message
// throw nlohmann's type_error 316 (invalid UTF-8) instead of returning the Status.
TEST(Tasks, LabelsFileLineNotUtf8IsAnError) {
  const std::string row = R"({"sentence": "Tom gave _ the book.", "option1": "Ann", "option2": "Bob", "answer": ""})";
  const std::string path = write_temp("wg_bytes.jsonl", {row});
  const std::string labels = write_temp("wg_bytes-labels.lst", {"\x82\x82"});
  auto r = parse_task("winogrande", path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(labels + ":1"), std::string::npos) << r.status().message();
  EXPECT_FALSE(r.status().hint().empty());
}

// Found by tests/fuzz/eval_tasks_fuzz (UBSan): a WinoGrande answer of -2^63 overflowed when the
// 1-based label was shifted to 0-based.
TEST(Tasks, ALabelOfMinusTwoToThe63IsAnError) {
  const std::string path = write_temp("wg_min.jsonl",
      {R"({"sentence": "The cup is _ full.", "option1": "half", "option2": "not", "answer": -9223372036854775808})"});
  auto r = parse_task("winogrande", path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(path + ":1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'answer'"), std::string::npos) << r.status().message();
}

TEST(Tasks, UnknownTaskAndMissingFile) {
  auto r = parse_task("mmlu", "/nonexistent");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().hint().find("piqa"), std::string::npos);
  auto r2 = parse_task("piqa", "/nonexistent/valid.jsonl");
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace lmt::eval
