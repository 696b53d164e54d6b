// `lmtrain tokenizer encode|decode` and `lmtrain bench tokenizer` as a user runs them: outputs,
// the JSON contracts, and errors (exit 1 with the file named and a hint). Needs the shared data.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/lmtrain_cli.h"

namespace {

using Result = lmt::test::CliResult;

Result run(const std::string& args, bool with_stderr = false) { return lmt::test::run_lmtrain(args, with_stderr); }

const std::string kTok = std::string(LMT_SHARED_DATA) + "/tokenizers";
const std::string kCl100k = kTok + "/tiktoken/cl100k_base.tiktoken";

class TokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kCl100k)) GTEST_SKIP() << "shared test data not found at " << kTok;
    dir_ = std::filesystem::temp_directory_path() / ("lmt_tok_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::filesystem::path dir_;
};

TEST_F(TokenizerCli, EncodeTextAndDecodeIds) {
  Result e = run("tokenizer encode --tokenizer " + kCl100k + " --text 'Hello world'");
  ASSERT_EQ(e.code, 0);
  EXPECT_EQ(e.out, "9906 1917\n");
  Result j = run("tokenizer encode --tokenizer " + kTok + "/gpt2 --text 'Hello world' --json");
  ASSERT_EQ(j.code, 0);
  EXPECT_EQ(nlohmann::json::parse(j.out)["ids"], nlohmann::json({15496, 995}));
  Result d = run("tokenizer decode --tokenizer " + kCl100k + " --ids 9906,1917");
  ASSERT_EQ(d.code, 0);
  EXPECT_EQ(d.out, "Hello world\n");
}

TEST_F(TokenizerCli, EncodeJsonlInputOneLinePerText) {
  const std::string in = write("in.jsonl", "{\"text\": \"Hello world\"}\n\n{\"text\": \"a\\nb\"}\n");
  Result r = run("tokenizer encode --tokenizer " + kTok + "/mistral/tokenizer.json --input " + in + " --json");
  ASSERT_EQ(r.code, 0);
  std::istringstream lines(r.out);
  std::string l1, l2, extra;
  ASSERT_TRUE(std::getline(lines, l1) && std::getline(lines, l2));
  EXPECT_FALSE(std::getline(lines, extra));
  EXPECT_EQ(nlohmann::json::parse(l1)["ids"], nlohmann::json({22557, 1526}));
  // Round trip through decode --input.
  const std::string ids = write("ids.jsonl", r.out);
  Result d = run("tokenizer decode --tokenizer " + kTok + "/mistral/tokenizer.json --input " + ids + " --json");
  ASSERT_EQ(d.code, 0);
  EXPECT_EQ(d.out, "{\"text\":\"Hello world\"}\n{\"text\":\"a\\nb\"}\n");
}

TEST_F(TokenizerCli, PlainTextInputAndSpecialTokens) {
  const std::string in = write("in.txt", "one line\n<|endoftext|>\n");
  Result r = run("tokenizer encode --tokenizer " + kCl100k + " --input " + in + " --special-tokens");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "606 1584\n100257\n");
}

TEST_F(TokenizerCli, ErrorsNameTheProblem) {
  Result missing = run("tokenizer encode --tokenizer /no/such.json --text x", true);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("/no/such.json"), std::string::npos) << missing.out;
  Result badid = run("tokenizer decode --tokenizer " + kCl100k + " --ids 1,x", true);
  EXPECT_EQ(badid.code, 1);
  EXPECT_NE(badid.out.find("'x'"), std::string::npos) << badid.out;
  Result range = run("tokenizer decode --tokenizer " + kCl100k + " --ids 100277", true);
  EXPECT_EQ(range.code, 1);
  const std::string bad = write("bad.jsonl", "{\"text\": \"ok\"}\nnot json\n");
  Result line = run("tokenizer encode --tokenizer " + kCl100k + " --input " + bad, true);
  EXPECT_EQ(line.code, 1);
  EXPECT_NE(line.out.find("bad.jsonl:2"), std::string::npos) << line.out;
  Result neither = run("tokenizer encode --tokenizer " + kCl100k, true);
  EXPECT_EQ(neither.code, 2);  // a missing input is a usage error (docs/CLI.md)
  EXPECT_NE(neither.out.find("hint:"), std::string::npos) << neither.out;
}

TEST_F(TokenizerCli, BenchJsonHasTheDocumentedKeys) {
  const std::string in = write("bench.jsonl", "{\"text\": \"Some text to encode, twice.\"}\n{\"text\": \"More.\"}\n");
  Result r = run("bench tokenizer --tokenizer " + kCl100k + " --input " + in + " --iters 1 --threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"mb_per_s", "tokens", "bytes", "seconds", "threads"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["bytes"].get<int64_t>(), 32);
  EXPECT_EQ(j["tokens"].get<int64_t>(), 9);  // Some/ text/ to/ encode/,/ twice/. + More/.
  EXPECT_GT(j["mb_per_s"].get<double>(), 0.0);
}

}  // namespace
