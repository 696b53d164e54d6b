// docs/CLI.md, checked mechanically: walks `lmtrain --help` and every subcommand's help recursively,
// then checks each leaf command's flags (kebab-case, --json/--quiet/--verbose, --set where --config,
// none of the retired spellings visible) and its exit code with no arguments (0 or 2, never 1 or a
// crash). Plus one regression test per inconsistency issue #19 listed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"
#include "common/shared_data.h"

namespace {

namespace fs = std::filesystem;
using Result = lmt::test::CliResult;

Result run(const std::string& args, bool with_stderr = false) { return lmt::test::run_lmtrain(args, with_stderr); }

std::string shared(const std::string& rel) { return std::string(LMT_SHARED_DATA) + "/" + rel; }

// One command's help, parsed: its subcommands and its visible long option names.
struct Help {
  std::vector<std::string> subcommands;
  std::set<std::string> flags;
  bool has_positionals = false;
};

Help parse_help(const std::string& text) {
  Help h;
  std::istringstream in(text);
  std::string line, section;
  const std::regex long_name(R"((?:^|[ ,])(--[^ ,{\[=]+))");
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ') {
      section = line;
      if (line.rfind("Positionals:", 0) == 0) h.has_positionals = true;
      continue;
    }
    if (line.size() < 3 || line[0] != ' ' || line[1] != ' ' || line[2] == ' ') continue;
    const std::string body = line.substr(2);
    const std::string names = body.substr(0, body.find("  "));  // the description follows two spaces
    if (section.rfind("Subcommands:", 0) == 0) {
      h.subcommands.push_back(names);
    } else if (names[0] == '-') {
      for (std::sregex_iterator it(names.begin(), names.end(), long_name), end; it != end; ++it) h.flags.insert((*it)[1]);
    }
  }
  return h;
}

// Every leaf command path ("bench matmul", "train", ...) with its parsed help.
void walk(const std::string& path, std::map<std::string, Help>* leaves) {
  Result r = run(path + " --help");
  ASSERT_EQ(r.code, 0) << "lmtrain " << path << " --help";
  Help h = parse_help(r.out);
  if (h.subcommands.empty()) {
    (*leaves)[path] = h;
    return;
  }
  for (const auto& sub : h.subcommands) walk(path.empty() ? sub : path + " " + sub, leaves);
}

const std::map<std::string, Help>& leaves() {
  static const std::map<std::string, Help> all = [] {
    std::map<std::string, Help> m;
    walk("", &m);
    return m;
  }();
  return all;
}

TEST(CliConvention, TheWalkFindsEveryCommand) {
  const auto& l = leaves();
  for (const char* cmd : {"train", "plan", "eval", "generate", "export", "logits", "report", "model info", "data prepare",
                          "data info", "data clean", "tokenizer encode", "tokenizer decode", "tokenizer train",
                          "bench matmul", "bench attention", "bench model", "bench train", "bench data", "bench tokenizer",
                          "bench peak", "bench collectives"})
    EXPECT_TRUE(l.count(cmd)) << "lmtrain " << cmd << " was not found by walking the help";
  EXPECT_GE(l.size(), 22u);
}

TEST(CliConvention, EveryLeafHasJsonQuietVerbose) {
  for (const auto& [cmd, h] : leaves())
    for (const char* f : {"--json", "--quiet", "--verbose", "--help"}) EXPECT_TRUE(h.flags.count(f)) << "lmtrain " << cmd << " lacks " << f;
}

TEST(CliConvention, EveryFlagIsKebabCaseAndNoRetiredSpellingIsVisible) {
  const std::regex kebab("--[a-z0-9]+(-[a-z0-9]+)*");
  const std::set<std::string> retired = {"--batch", "--seq", "--max-seq", "--accum", "--workers", "--model", "--no-flash"};
  for (const auto& [cmd, h] : leaves()) {
    for (const auto& f : h.flags) {
      EXPECT_TRUE(std::regex_match(f, kebab)) << "lmtrain " << cmd << ": " << f << " is not kebab-case";
      EXPECT_FALSE(retired.count(f)) << "lmtrain " << cmd << " shows the retired spelling " << f << " (docs/CLI.md)";
    }
  }
}

TEST(CliConvention, CommandsThatReadARecipeTakeSet) {
  int with_config = 0;
  for (const auto& [cmd, h] : leaves()) {
    if (!h.flags.count("--config")) continue;
    ++with_config;
    EXPECT_TRUE(h.flags.count("--set")) << "lmtrain " << cmd << " reads a recipe (--config) but has no --set";
  }
  EXPECT_GE(with_config, 2);  // train, data clean
}

TEST(CliConvention, InputsAreNamedExceptReportRuns) {
  for (const auto& [cmd, h] : leaves())
    if (cmd != "report") {
      EXPECT_FALSE(h.has_positionals) << "lmtrain " << cmd << " shows a positional argument";
    }
  EXPECT_TRUE(leaves().at("report").has_positionals);
}

TEST(CliConvention, EveryLeafWithNoArgumentsExits0Or2) {
  // These run a benchmark with their defaults when given nothing (exit 0, checked by their own
  // tests); running them here would only spend time.
  const std::set<std::string> runs_by_default = {"bench matmul", "bench attention", "bench model", "bench train",
                                                 "bench peak", "bench collectives", "bench decode"};
  for (const auto& [cmd, h] : leaves()) {
    if (runs_by_default.count(cmd)) continue;
    Result r = run(cmd, true);
    EXPECT_TRUE(r.code == 0 || r.code == 2) << "lmtrain " << cmd << " with no arguments exited " << r.code << ":\n" << r.out;
    if (r.code == 2) {
      EXPECT_NE(r.out.find("Usage:"), std::string::npos) << "lmtrain " << cmd << ": no usage shown\n" << r.out;
    }
  }
}

// --- regression tests, one per inconsistency of issue #19 ---

TEST(CliConvention, TrainWithoutConfigIsAUsageErrorExit2) {
  Result r = run("train --run-dir /nonexistent/run", true);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--config"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Usage:"), std::string::npos) << r.out;
  EXPECT_EQ(run("train --config configs/demo.toml --run-dir /tmp/x --allow-changes").code, 2);  // needs --resume
}

TEST(CliConvention, ModelInfoWithoutPresetIsAUsageErrorExit2) {
  Result r = run("model info", true);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--preset"), std::string::npos) << r.out;
}

TEST(CliConvention, ConflictingOptionsAreUsageErrors) {
  EXPECT_EQ(run("generate --checkpoint a --preset b --prompt-ids 1").code, 2);
  EXPECT_EQ(run("tokenizer decode --tokenizer " + shared("tokenizers/gpt2")).code, 2);  // neither --ids nor --input
  EXPECT_EQ(run("plan --preset tiny --params 1e9 --hardware cpu").code, 2);
}

TEST(CliConvention, BadLogLevelIsAUsageErrorNamingTheVariable) {
  const std::string cmd = "LMT_LOG_LEVEL=bogus " + std::string(LMTRAIN_BIN) + " model info --preset gpt2-124m 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_NE(out.find("LMT_LOG_LEVEL"), std::string::npos) << out;
  EXPECT_NE(out.find("bogus"), std::string::npos) << out;
  EXPECT_NE(out.find("debug, info, warning, error"), std::string::npos) << out;
}

TEST(CliConvention, GoodLogLevelsAreAccepted) {
  for (const char* level : {"debug", "info", "warning", "error"}) {
    const std::string cmd = std::string("LMT_LOG_LEVEL=") + level + " " + LMTRAIN_BIN + " model info --preset gpt2-124m --json >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << level;
  }
}

TEST(CliConvention, JsonIsCompactOneObjectPerLine) {
  // model info and plan printed pretty (multi-line) JSON before.
  for (const char* cmd : {"model info --preset gpt2-124m --json", "plan --preset gpt2-124m --hardware h100-sxm --json"}) {
    Result r = run(cmd);
    ASSERT_EQ(r.code, 0) << cmd;
    ASSERT_FALSE(r.out.empty());
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << cmd << " printed more than one line:\n" << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j.is_object());
    EXPECT_EQ(j.dump() + "\n", r.out) << cmd << ": not compact";
  }
}

TEST(CliConvention, DeprecatedSpellingStillWorksWithAWarning) {
  Result r = run("model info --preset gpt2-124m --seq 256 --json", true);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: --seq is deprecated, use --seq-len"), std::string::npos) << r.out;
  Result n = run("model info --preset gpt2-124m --seq-len 256 --json");
  ASSERT_EQ(n.code, 0);
  EXPECT_EQ(nlohmann::json::parse(n.out)["seq_len"], 256);
  Result p = run("plan --model gpt2-124m --hardware h100-sxm --no-flash --json", true);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("--model is deprecated, use --preset"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("--no-flash is deprecated, use --attention naive"), std::string::npos) << p.out;
}

TEST(CliConvention, PlanAttentionNaiveEqualsTheOldNoFlash) {
  Result a = run("plan --preset gpt2-124m --hardware h100-sxm --attention naive --json");
  Result b = run("plan --preset gpt2-124m --hardware h100-sxm --no-flash --json");
  Result c = run("plan --preset gpt2-124m --hardware h100-sxm --json");
  ASSERT_EQ(a.code, 0);
  ASSERT_EQ(b.code, 0);
  ASSERT_EQ(c.code, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);  // flash (the default) needs less activation memory
  EXPECT_EQ(run("plan --preset gpt2-124m --hardware h100-sxm --attention sparse").code, 2);
}

TEST(CliConvention, SharedMemoryIsAFlag) {
  const Help& h = leaves().at("bench train");
  EXPECT_TRUE(h.flags.count("--shared-memory"));
  EXPECT_TRUE(h.flags.count("--no-shared-memory"));
  // A value after the flag is an extra argument now: usage error, not a silently read boolean.
  EXPECT_EQ(run("bench train --shared-memory 0").code, 2);
}

TEST(CliConvention, DataInfoTakesDataset) {
  LMT_SKIP_WITHOUT_SHARED("tokenizers/gpt2");
  // A real prepared dataset is made by `data prepare` from a small corpus.
  const fs::path dir = fs::temp_directory_path() / ("lmt_cli_convention_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path text = dir / "a.txt";
  {
    FILE* f = std::fopen(text.c_str(), "w");
    ASSERT_NE(f, nullptr);
    for (int i = 0; i < 200; ++i) std::fprintf(f, "In the beginning God created the heaven and the earth. %d\n", i);
    std::fclose(f);
  }
  const std::string ds = (dir / "ds").string();
  Result prep = run("data prepare --tokenizer " + shared("tokenizers/gpt2") + " --input " + text.string() + " --out " + ds +
                        " --threads 1 --json",
                    true);
  ASSERT_EQ(prep.code, 0) << prep.out;
  Result r = run("data info --dataset " + ds + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);
  EXPECT_EQ(nlohmann::json::parse(r.out)["dir"], ds);
  Result old = run("data info " + ds + " --json", true);
  EXPECT_EQ(old.code, 0) << old.out;
  EXPECT_NE(old.out.find("deprecated, use --dataset"), std::string::npos) << old.out;
  EXPECT_EQ(run("data info").code, 2);
  fs::remove_all(dir);
}

// Each line of `out` is one compact JSON object; returns them.
std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object()) << "not a JSON object line: " << line;
    if (!j.is_object()) continue;
    EXPECT_EQ(j.dump(), line) << "not compact";
    v.push_back(j);
  }
  return v;
}

class CliJson : public lmt::test::ScratchDirTest {};

// train, tokenizer train and export had no --json: now each prints compact JSON lines on stdout only.
TEST_F(CliJson, TrainTokenizerTrainAndExportPrintCompactJsonLines) {
  lmt::test::write_markov_dataset(path("data"), 64, "cli_convention_test");
  std::ofstream(path("recipe.toml")) << lmt::test::tiny_recipe_head(path("data"))
                                     << "[train]\nseq_len = 32\nmicro_batch = 2\nmax_steps = 3\ndtype = 'fp32'\nlog_every = 1\n"
                                        "[eval]\nevery = 0\nbatches = 1\n[checkpoint]\nasync = false\n";
  Result t = run("train --config " + path("recipe.toml") + " --run-dir " + path("run") + " --json");
  ASSERT_EQ(t.code, 0) << t.out;
  const auto train = json_lines(t.out);
  ASSERT_EQ(train.size(), 2u) << t.out;  // the step lines went to stderr
  EXPECT_EQ(train[0]["type"], "start");
  EXPECT_EQ(train[0]["max_steps"], 3);
  EXPECT_EQ(train[1]["type"], "end");
  EXPECT_EQ(train[1]["status"], "ok");
  EXPECT_EQ(train[1]["step"], 3);

  Result e = run("export --checkpoint " + path("run") + " --format hf --tokenizer none --out " + path("hf") + " --json");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto exp = json_lines(e.out);
  ASSERT_EQ(exp.size(), 1u) << e.out;
  EXPECT_EQ(exp[0]["out"], path("hf"));
  EXPECT_EQ(exp[0]["format"], "hf");
  EXPECT_TRUE(fs::exists(path("hf/config.json")));

  {
    std::ofstream corpus(path("corpus.txt"));
    for (int i = 0; i < 300; ++i) corpus << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  Result k = run("tokenizer train --input " + path("corpus.txt") + " --vocab-size 300 --out " + path("tok.json") + " --json");
  ASSERT_EQ(k.code, 0) << k.out;
  const auto tok = json_lines(k.out);
  ASSERT_EQ(tok.size(), 1u) << k.out;
  EXPECT_EQ(tok[0]["vocab_size"], 300);
  EXPECT_EQ(tok[0]["out"], path("tok.json"));
}

// data clean --config ... --set key=value: the override wins over the file (the report records it).
TEST_F(CliJson, DataCleanSetOverridesTheConfig) {
  {
    std::ofstream in(path("in.jsonl"));
    for (int i = 0; i < 20; ++i) in << "{\"text\": \"short doc " << i << "\"}\n";
  }
  Result bad = run("data clean --input " + path("in.jsonl") + " --out " + path("o1") + " --set no_such.key=1", true);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--set no_such.key=1"), std::string::npos) << bad.out;
  // A number, read as TOML: recorded in the report's settings.
  Result num = run("data clean --input " + path("in.jsonl") + " --out " + path("o2") + " --set gopher_quality.min_doc_words=1 --json");
  ASSERT_EQ(num.code, 0) << num.out;
  const std::string settings = nlohmann::json::parse(lmt::test::read_bytes(path("o2/clean_report.json")))["settings"];
  EXPECT_NE(settings.find("gopher_quality.min_doc_words=1\n"), std::string::npos) << settings;
  // A bare word, read as a string: no document has a "body" field, so the override took effect.
  Result str = run("data clean --input " + path("in.jsonl") + " --out " + path("o3") + " --set input.text_field=body", true);
  EXPECT_EQ(str.code, 1) << str.out;
  EXPECT_NE(str.out.find("no string field 'body'"), std::string::npos) << str.out;
}

}  // namespace
