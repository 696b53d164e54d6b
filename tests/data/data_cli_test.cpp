// `lmtrain data prepare|info` and `lmtrain bench data` as a user runs them: exit codes (0 ok,
// 1 error with a hint, 2 usage), JSON summaries, and errors that name the file.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "data_test_util.h"

#include "common/lmtrain_cli.h"

namespace lmt::data {
namespace {

using Result = lmt::test::CliResult;

Result run(const std::string& args, bool with_stderr = false) { return lmt::test::run_lmtrain(args, with_stderr); }

class DataCliTest : public testing::ScratchDirTest {
 protected:
  void SetUp() override {
    testing::ScratchDirTest::SetUp();
    gpt2_ = std::string(LMT_SHARED_DATA) + "/tokenizers/gpt2";
    if (!std::filesystem::exists(gpt2_ + "/encoder.json"))
      GTEST_SKIP() << "the shared GPT-2 tokenizer is not under " << LMT_SHARED_DATA << " (see its README.md)";
    std::string jsonl;
    for (int i = 0; i < 30; ++i)
      jsonl += nlohmann::json{{"text", "Document number " + std::to_string(i) + " says hello to the loader."}}.dump() + "\n";
    testing::write_bytes(path("docs.jsonl"), jsonl);
  }
  std::string prepare_args(const std::string& out) const {
    return "data prepare --tokenizer " + gpt2_ + " --input " + path("docs.jsonl") + " --out " + out +
           " --threads 2 --val-fraction 0.2 --shard-tokens 100";
  }
  std::string gpt2_;
};

TEST_F(DataCliTest, PrepareThenInfoThenBench) {
  Result p = run(prepare_args(path("ds")) + " --json");
  ASSERT_EQ(p.code, 0) << p.out;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["documents"], 30);
  EXPECT_EQ(j["token_dtype"], "uint16");
  EXPECT_GT(j["mb_per_s"].get<double>(), 0);
  EXPECT_GT(j["train"]["shards"].get<int>(), 1);  // 100-token shards

  Result info = run("data info --dataset " + path("ds") + " --verify --json");
  ASSERT_EQ(info.code, 0) << info.out;
  auto ij = nlohmann::json::parse(info.out);
  EXPECT_EQ(ij["splits"]["train"]["documents"].get<int>() + ij["splits"]["val"]["documents"].get<int>(), 30);
  EXPECT_EQ(ij["eos_id"], 50256);
  EXPECT_TRUE(ij["verified"].get<bool>());
  Result text = run("data info --dataset " + path("ds"));
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("tokens per document"), std::string::npos) << text.out;

  Result bench = run("bench data --data " + path("ds") + " --micro-batch 2 --seq-len 16 --iters 5 --warmup 1 --json");
  ASSERT_EQ(bench.code, 0) << bench.out;
  auto bj = nlohmann::json::parse(bench.out);
  for (const char* key : {"open_ms", "build_us", "next_prefetch_us", "machine"}) EXPECT_TRUE(bj.contains(key)) << key;
}

TEST_F(DataCliTest, ErrorsExitOneWithAHintAndNameTheFile) {
  std::filesystem::create_directory(path("busy"));
  testing::write_bytes(path("busy/keep"), "x");
  Result busy = run(prepare_args(path("busy")), true);
  EXPECT_EQ(busy.code, 1);
  EXPECT_NE(busy.out.find("not empty"), std::string::npos) << busy.out;
  EXPECT_NE(busy.out.find("hint:"), std::string::npos) << busy.out;

  Result missing = run("data info --dataset " + path("nowhere"), true);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find(path("nowhere")), std::string::npos) << missing.out;

  ASSERT_EQ(run(prepare_args(path("ds"))).code, 0);
  const std::string shard = path("ds/train-000001.bin");
  std::string bytes = testing::read_bytes(shard);
  bytes[bytes.size() / 2] ^= 0x5a;
  testing::write_bytes(shard, bytes);
  EXPECT_EQ(run("data info --dataset " + path("ds")).code, 0);  // headers only
  Result corrupt = run("data info --dataset " + path("ds") + " --verify", true);
  EXPECT_EQ(corrupt.code, 1);
  EXPECT_NE(corrupt.out.find(shard), std::string::npos) << corrupt.out;
  EXPECT_NE(corrupt.out.find("checksum mismatch"), std::string::npos) << corrupt.out;

  Result eos = run(prepare_args(path("other")) + " --eos '<|nope|>'", true);
  EXPECT_EQ(eos.code, 1);
  EXPECT_NE(eos.out.find("--eos"), std::string::npos) << eos.out;
  EXPECT_FALSE(std::filesystem::exists(path("other")));
}

TEST_F(DataCliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(run("data").code, 2);
  EXPECT_EQ(run("data prepare --input x").code, 2);  // --tokenizer and --out are required
  EXPECT_EQ(run("data info").code, 2);
}

}  // namespace
}  // namespace lmt::data
