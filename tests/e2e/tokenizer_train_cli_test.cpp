// `lmtrain tokenizer train` as a user runs it: a tokenizer.json appears (written atomically, no
// temporary left behind), an existing --out is kept unless --force, and bad inputs fail with exit 1
// and a message naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/lmtrain_cli.h"

namespace {

namespace fs = std::filesystem;

using Result = lmt::test::CliResult;

Result run(const std::string& args) { return lmt::test::run_lmtrain(args, /*with_stderr=*/true); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TokenizerTrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lmt_tok_train_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    corpus_ = (dir_ / "corpus.jsonl").string();
    std::ofstream(corpus_) << "{\"text\": \"the cat sat on the mat\"}\n{\"text\": \"the dog sat on the log\"}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string corpus_;
};

TEST_F(TokenizerTrainCli, WritesATokenizerJsonAndASummary) {
  const fs::path out = dir_ / "tok.json";
  Result r = run("tokenizer train --input " + corpus_ + " --vocab-size 270 --out " + out.string() + " --threads 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + out.string()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("counting ["), std::string::npos) << "no progress bar when stderr is not a terminal";
  const nlohmann::json j = nlohmann::json::parse(read_all(out));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 269);
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}

TEST_F(TokenizerTrainCli, ExistingOutputIsKeptUnlessForced) {
  const fs::path out = dir_ / "tok.json";
  std::ofstream(out) << "precious";
  const std::string args = "tokenizer train --input " + corpus_ + " --vocab-size 270 --out " + out.string();
  Result r = run(args);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("already exists"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  EXPECT_EQ(read_all(out), "precious");
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));

  Result forced = run(args + " --force --progress");
  ASSERT_EQ(forced.code, 0) << forced.out;
  // --progress draws the shared bar (lmt/progress) although stderr is a pipe: redrawn in place.
  EXPECT_NE(forced.out.find("\rmerging ["), std::string::npos) << "--progress draws the bar: " << forced.out;
  EXPECT_NE(forced.out.find("] 13/13 100%"), std::string::npos) << forced.out;  // 270 - 256 bytes - 1 special
  EXPECT_NE(forced.out.find("\x1b[K"), std::string::npos) << forced.out;
  EXPECT_EQ(nlohmann::json::parse(read_all(out))["version"], "1.0");
}

TEST_F(TokenizerTrainCli, BadInputsFailWithTheFileNamed) {
  const fs::path out = dir_ / "tok.json";
  Result missing = run("tokenizer train --input " + (dir_ / "nope.txt").string() + " --vocab-size 300 --out " + out.string());
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("nope.txt"), std::string::npos) << missing.out;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".tmp"));

  Result field = run("tokenizer train --input " + corpus_ + " --text-field body --vocab-size 300 --out " + out.string());
  EXPECT_EQ(field.code, 1);
  EXPECT_NE(field.out.find(corpus_ + ":1: no field \"body\""), std::string::npos) << field.out;
  EXPECT_FALSE(fs::exists(out));

  Result small = run("tokenizer train --input " + corpus_ + " --vocab-size 100 --out " + out.string());
  EXPECT_EQ(small.code, 1);
  EXPECT_NE(small.out.find("--vocab-size 100 is below 257"), std::string::npos) << small.out;

  Result no_dir = run("tokenizer train --input " + corpus_ + " --vocab-size 300 --out " + (dir_ / "no/such/dir/t.json").string());
  EXPECT_EQ(no_dir.code, 1);
  EXPECT_NE(no_dir.out.find("does not exist"), std::string::npos) << no_dir.out;

  EXPECT_EQ(run("tokenizer train --vocab-size 300 --out " + out.string()).code, 2) << "--input is required";
}

}  // namespace
