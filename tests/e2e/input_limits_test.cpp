// Hostile input, as a user (or a script gone wrong) gives it: every absurd value is refused at once
// with exit 1 and a message naming the value and where it came from, never a crash, a hang or an
// out-of-memory abort (issue #20, "Input limits", "Bad values accepted silently", "Hangs",
// "Unclear messages").
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "common/files.h"
#include "common/scoped_env.h"
#include "common/lmtrain_cli.h"
#include "common/synthetic_dataset.h"

namespace {

using lmt::test::CliResult;

CliResult run(const std::string& args) { return lmt::test::run_lmtrain(args, /*with_stderr=*/true); }

bool has(const CliResult& r, const std::string& text) { return r.out.find(text) != std::string::npos; }

using lmt::test::ScopedEnv;

class InputLimits : public lmt::test::ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    lmt::test::write_markov_dataset(path("data"), 64, "input_limits_test");
    recipe_ = path("recipe.toml");
    lmt::test::write_bytes(recipe_, "[data]\npath = \"" + path("data") + "\"\n[train]\nmax_steps = 2\n");
  }
  // `lmtrain train` on the recipe with extra flags; it must fail before training starts.
  CliResult train(const std::string& flags) { return run("train --config " + recipe_ + " --run-dir " + path("run") + " " + flags); }

  std::string recipe_;
};

// A value outside its key's range is refused where it is set, and the message names the --set flag
// (it once blamed the recipe file for every --set error).
TEST_F(InputLimits, SetErrorsNameTheFlag) {
  CliResult r = train("--set stability.spike_window=-1");  // once std::length_error after the last step
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r, "lmtrain: error: --set stability.spike_window=-1: key 'stability.spike_window' = -1 is out of range"))
      << r.out;
  EXPECT_TRUE(has(r, "[1, 100000]")) << r.out;
  EXPECT_FALSE(has(r, recipe_)) << r.out;
  // A limit involving several keys, checked when the recipe is built, names the flag too.
  CliResult seq = train("--set train.seq_len=100000");
  EXPECT_EQ(seq.code, 1) << seq.out;
  EXPECT_TRUE(has(seq, "--set train.seq_len=100000: train.seq_len = 100000 exceeds the model's max_seq_len 256")) << seq.out;
  for (const char* bad : {"train.grad_clip=nan", "checkpoint.keep=-1", "eval.batches=-1", "stability.max_bad_steps=0",
                          "model.rope_theta=nan", "train.seed=-1", "train.max_steps=1000000000000000000"}) {
    CliResult b = train(std::string("--set ") + bad);
    EXPECT_EQ(b.code, 1) << bad << "\n" << b.out;
    EXPECT_TRUE(has(b, std::string("--set ") + bad + ": key '")) << b.out;
  }
  EXPECT_FALSE(std::filesystem::exists(path("run")));  // refused before anything was written
}

TEST_F(InputLimits, RecipeFileErrorsNameTheFileAndTheKey) {
  lmt::test::write_bytes(recipe_, "[data]\npath = \"" + path("data") + "\"\nweight = -1.0\n");
  CliResult r = train("");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r, recipe_ + ": key 'data.weight' = -1 is out of range: it must be in (0, 1e6]")) << r.out;
}

TEST_F(InputLimits, ConfigThatIsADirectoryIsAnError) {
  CliResult r = run("train --config " + path("data") + " --run-dir " + path("run"));
  EXPECT_EQ(r.code, 1) << r.out;  // it once trained on every default and exited 0
  EXPECT_TRUE(has(r, "is a directory, not a TOML recipe")) << r.out;
}

TEST_F(InputLimits, DataPathThatIsAFileSaysSo) {
  CliResult r = train("--set data.path=" + recipe_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r, "--set data.path=" + recipe_ + ": data.path: " + recipe_ + " is a file, not a dataset directory")) << r.out;
  EXPECT_TRUE(has(r, "manifest.json")) << r.out;  // the hint says what a dataset directory holds
}

// A micro-batch whose activations cannot fit in this machine's memory is refused before anything is
// allocated (it once ended in an out-of-memory abort).
TEST_F(InputLimits, MicroBatchBeyondMemoryIsRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  CliResult r = train("--set train.micro_batch=1000000");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r, "--set train.micro_batch=1000000: train.micro_batch = 1000000")) << r.out;
  EXPECT_TRUE(has(r, "more than this machine has")) << r.out;
  EXPECT_TRUE(has(r, "hint: lower train.micro_batch")) << r.out;
  CliResult range = train("--set train.micro_batch=100000000");
  EXPECT_EQ(range.code, 1) << range.out;
  EXPECT_TRUE(has(range, "key 'train.micro_batch' = 100000000 is out of range")) << range.out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

// Thread counts beyond the limit crashed inside oneDNN (--threads 100000, OMP_NUM_THREADS=70000) or
// threw an uncaught std::system_error (--threads 100000).
TEST_F(InputLimits, AbsurdThreadCountsAreRefused) {
  CliResult threads = run("generate --preset tiny --prompt-ids 1,2 --max-tokens 1 --threads 100000");
  EXPECT_EQ(threads.code, 1) << threads.out;
  EXPECT_TRUE(has(threads, "--threads 100000 is out of range")) << threads.out;
  CliResult workers = run("data prepare --tokenizer " + recipe_ + " --input " + recipe_ + " --out " + path("out") +
                          " --threads 100000");
  EXPECT_EQ(workers.code, 1) << workers.out;
  EXPECT_TRUE(has(workers, "--threads 100000 is out of range")) << workers.out;
  CliResult bpe = run("tokenizer train --input " + recipe_ + " --vocab-size 300 --out " + path("tok.json") + " --threads 100000");
  EXPECT_EQ(bpe.code, 1) << bpe.out;
  EXPECT_TRUE(has(bpe, "--threads 100000 is out of range")) << bpe.out;

  ScopedEnv env("OMP_NUM_THREADS", "70000");
  for (const std::string& cmd : {std::string("generate --preset tiny --prompt-ids 1,2 --max-tokens 1"),
                                 "eval --preset tiny --task val --data " + path("data") + " --micro-batch 1 --seq-len 32",
                                 "train --config " + recipe_ + " --run-dir " + path("run")}) {
    CliResult r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_TRUE(has(r, "OMP_NUM_THREADS=70000 is out of range")) << r.out;
  }
}

TEST_F(InputLimits, EvalBatchBeyondMemoryIsRefused) {
  CliResult range = run("eval --preset tiny --task val --data " + path("data") + " --micro-batch 100000000");
  EXPECT_EQ(range.code, 1) << range.out;
  EXPECT_TRUE(has(range, "--micro-batch 100000000 is out of range")) << range.out;
  CliResult memory = run("eval --preset tiny --task val --data " + path("data") + " --micro-batch 1048576 --seq-len 256");
  EXPECT_EQ(memory.code, 1) << memory.out;
  EXPECT_TRUE(has(memory, "validation batches of 1048576 x 256 tokens needs")) << memory.out;
  EXPECT_TRUE(has(memory, "more than this machine has")) << memory.out;
}

// A model directory whose config describes an absurd model is refused before its parameters are
// allocated (n_layers = 1e8 once made generate run for minutes while its memory grew).
TEST_F(InputLimits, HugeModelConfigsAreRefusedBeforeAllocating) {
  auto gpt2_dir = [&](const std::string& name, int64_t layers, int64_t width) {
    std::filesystem::create_directories(path(name));
    lmt::test::write_bytes(path(name) + "/config.json",
                           "{\"model_type\": \"gpt2\", \"vocab_size\": 64, \"n_positions\": 64, \"n_embd\": " +
                               std::to_string(width) + ", \"n_layer\": " + std::to_string(layers) + ", \"n_head\": 4}");
    lmt::test::write_bytes(path(name) + "/model.safetensors", "");
    return path(name);
  };
  const auto start = std::chrono::steady_clock::now();
  CliResult layers = run("generate --checkpoint " + gpt2_dir("deep", 100000000, 64) + " --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(layers.code, 1) << layers.out;
  EXPECT_TRUE(has(layers, "n_layers = 100000000 is out of range: it must be in [1, 16384]")) << layers.out;
  // Within every structural limit, but 3.3e12 parameters: more than this machine's memory.
  CliResult wide = run("generate --checkpoint " + gpt2_dir("wide", 4096, 8192) + " --prompt-ids 1,2 --max-tokens 1");
  EXPECT_EQ(wide.code, 1) << wide.out;
  EXPECT_TRUE(has(wide, "more than this machine has")) << wide.out;
  EXPECT_TRUE(has(wide, "n_layers 4096")) << wide.out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

// Perplexity is printed with 4 significant digits (it was once printed as a 300-digit number).
TEST_F(InputLimits, PerplexityIsPrintedCompactly) {
  CliResult r = run("eval --preset tiny --task val --data " + path("data") + " --micro-batch 1 --seq-len 32 --limit 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("| ppl ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t end = r.out.find(" |", at + 6);
  ASSERT_NE(end, std::string::npos) << r.out;
  EXPECT_LE(end - (at + 6), 10u) << r.out;
}

// The benchmarks take sizes too: absurd ones are refused before anything is allocated.
TEST_F(InputLimits, BenchmarkSizesAreBounded) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& args : {std::string("bench matmul --m 100000000 --k 768 --n 10"),
                                  std::string("bench matmul --m 10000000 --k 1000000 --n 10"),
                                  std::string("bench matmul --form gram --m 4000000 --k 10 --n 10"),
                                  std::string("bench attention --micro-batch 100000 --seq-len 100000"),
                                  std::string("bench model --preset tiny --micro-batch 1000000 --seq-len 256"),
                                  std::string("bench train --preset tiny --micro-batch 1000000 --seq-len 256"),
                                  "bench data --data " + path("data") + " --micro-batch 100000000",
                                  std::string("model info --preset tiny --seq-len 100000000000")}) {
    CliResult r = run(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_TRUE(has(r, "is out of range") || has(r, "more than this machine has")) << args << "\n" << r.out;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
