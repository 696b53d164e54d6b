// The trainer on a backend whose memory is not the host's: the model, the optimizer state, the batch
// upload, checkpoint save and load (through host staging) and resume all go through the backend's
// copies (copy, and copy_async read after a fence).
//
// LMT_TRAINER_TEST_BACKEND names the backend under test:
// - "cpu_as_device" (trainer_backend_test, every machine): the cpu backend's kernels on a pretend
//   device, cuda:7, whose memory host code cannot touch (common/pretend_device.h), so every staging
//   path of a device backend runs on a CPU, a host access to device memory crashes as on a GPU, and
//   the losses must equal the plain cpu backend's bit for bit;
// - "cuda" (cuda_trainer_test, label gpu): the real GPU; losses within bf16 tolerance of the cpu run.
// Either way a run stopped at step 4 and resumed must give the uninterrupted run's losses exactly.
#include <gtest/gtest.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/pretend_device.h"
#include "common/synthetic_dataset.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"
#include "lmt/train/trainer.h"

#ifndef LMT_TRAINER_TEST_BACKEND
#define LMT_TRAINER_TEST_BACKEND "cpu_as_device"
#endif

namespace lmt::train {
namespace {
namespace fs = std::filesystem;

// The cpu kernels on a pretend device, cuda:7, whose memory host code cannot touch
// (common/pretend_device.h): nothing but the backend's ops may move data in or out of it.
class CpuAsDeviceBackend final : public test::PretendDeviceBackend {
 public:
  CpuAsDeviceBackend() : PretendDeviceBackend("cpu_as_device", 7) {}
  // A device of `memory_bytes` (0: this machine's memory), for the memory checks.
  MemoryTarget memory_target() override { return {memory_bytes, "cuda:7 (a pretend device)"}; }
  static inline double memory_bytes = 0;
};

LMT_REGISTER_BACKEND(cpu_as_device, [] { return std::make_unique<CpuAsDeviceBackend>(); });

constexpr int64_t kVocab = 64;
const bool kExact = std::string(LMT_TRAINER_TEST_BACKEND) == "cpu_as_device";

class TrainerBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto be = kernels::find_backend(LMT_TRAINER_TEST_BACKEND);
    if (!be.ok()) GTEST_SKIP() << be.status().ToString();
    root_ = fs::temp_directory_path() / ("lmt_trainer_backend_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    test::write_markov_dataset((root_ / "data").string(), kVocab, "trainer_backend_test");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<Trainer> make(const std::string& backend, const std::string& run, bool resume = false,
                                const std::vector<std::string>& extra = {}) {
    config::Config c = config::Config::defaults();
    for (const std::string& kv : std::vector<std::string>{"model.n_layers=2", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2",
                                 "model.head_dim=8", "model.ffn_hidden=64", "model.max_seq_len=64",
                                 "train.micro_batch=4", "train.seq_len=32", "train.max_steps=8", "optim.lr=3e-3",
                                 "schedule.warmup_steps=2", "eval.batches=2", "eval.every=4", "checkpoint.every=4",
                                 "checkpoint.async=false", "runtime.backend=" + backend,
                                 "data.path=" + (root_ / "data").string()})
      EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    for (const std::string& kv : extra) EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    auto recipe = recipe_from_config(c, "test.toml");
    EXPECT_TRUE(recipe.ok()) << recipe.status().ToString();
    auto t = Trainer::create(*recipe, c.to_toml(), (root_ / run).string(), resume);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // step -> loss of RUN/metrics.jsonl's step records; "val" -> the last validation loss.
  std::map<std::string, double> losses_of(const std::string& run) {
    std::map<std::string, double> out;
    std::ifstream in(root_ / run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.value("type", "") == "step") out[std::to_string(j["step"].get<int64_t>())] = j["loss"].get<double>();
      if (j.value("type", "") == "val") out["val"] = j["val_loss"].get<double>();
    }
    return out;
  }

  // `got`'s losses against the cpu run's `want`: bit for bit on the pretend device, within bf16
  // tolerance on a GPU.
  static void expect_like_cpu(const std::map<std::string, double>& want, const std::map<std::string, double>& got) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, loss] : want) {
      if (kExact) {
        EXPECT_EQ(got.at(key), loss) << key;
      } else {
        EXPECT_NEAR(got.at(key), loss, 2e-2 * loss) << key;
      }
    }
  }

  fs::path root_;
};

TEST_F(TrainerBackendTest, TrainsLikeCpuAndResumesExactly) {
  auto cpu = make("cpu", "cpu");
  ASSERT_TRUE(cpu && cpu->run().ok());
  auto full = make(LMT_TRAINER_TEST_BACKEND, "full");
  ASSERT_TRUE(full && full->run().ok());
  auto half = make(LMT_TRAINER_TEST_BACKEND, "resumed");
  ASSERT_TRUE(half && half->run(/*stop_after=*/4).ok());
  half.reset();
  auto rest = make(LMT_TRAINER_TEST_BACKEND, "resumed", /*resume=*/true);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->step(), 4);
  ASSERT_TRUE(rest->run().ok());

  const auto want = losses_of("cpu"), got = losses_of("full"), resumed = losses_of("resumed");
  ASSERT_EQ(want.size(), 9u) << "8 steps and a validation loss";
  expect_like_cpu(want, got);
  ASSERT_EQ(resumed.size(), got.size());
  for (const auto& [key, loss] : got)
    EXPECT_EQ(resumed.at(key), loss) << key << ": the resumed run differs from the uninterrupted one";
  EXPECT_TRUE(fs::exists(root_ / "full" / "checkpoints" / "step_00000008" / "manifest.json"));
}

// An asynchronous checkpoint snapshots the parameters and optimizer state beside the next step
// (Backend::snapshot_async; the step's update waits for the snapshot). Resumed from the one saved
// mid-run, a run must continue exactly as the uninterrupted one did. On the pretend device a
// snapshot reads its source only when joined, so an update that did not wait for it would have
// saved the next step's values here.
TEST_F(TrainerBackendTest, ResumesExactlyFromACheckpointSavedBesideTheNextStep) {
  const std::vector<std::string> async = {"checkpoint.async=true"};
  auto full = make(LMT_TRAINER_TEST_BACKEND, "full", /*resume=*/false, async);
  ASSERT_TRUE(full && full->run().ok());
  full.reset();
  // The run as it stood after step 4: the checkpoint saved while step 5 ran, the records up to it.
  fs::copy(root_ / "full", root_ / "from4", fs::copy_options::recursive);
  fs::remove_all(root_ / "from4" / "checkpoints" / "step_00000008");
  {
    std::ifstream in(root_ / "full" / "metrics.jsonl");
    std::ofstream out(root_ / "from4" / "metrics.jsonl", std::ios::trunc);
    std::string line;
    while (std::getline(in, line))
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= 4) out << line << "\n";
  }
  auto rest = make(LMT_TRAINER_TEST_BACKEND, "from4", /*resume=*/true, async);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->step(), 4);
  ASSERT_TRUE(rest->run().ok());
  const auto want = losses_of("full"), got = losses_of("from4");
  ASSERT_EQ(want.size(), 9u) << "8 steps and a validation loss";
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, loss] : want)
    EXPECT_EQ(got.at(key), loss) << key << ": the run resumed from step 4 differs from the uninterrupted one";
}

// The recipe options with host-side code of their own (Muon, gradient accumulation, z-loss,
// recomputation, restarting positions, fp32, per-layer gradient norms, asynchronous checkpoints) on
// the backend under test: the cpu run's losses (bit for bit on the pretend device, whose memory host
// code cannot touch), and the same metrics records.
TEST_F(TrainerBackendTest, RecipeOptionsTrainLikeCpu) {
  const std::vector<std::vector<std::string>> variants = {
      {"optim.name=muon"},
      {"train.grad_accum=2", "train.z_loss=1e-3", "train.recompute=true", "data.reset_positions=true"},
      {"train.dtype=fp32", "metrics.layer_grad_norm_every=2", "checkpoint.async=true", "train.doc_masking=false"}};
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    const std::string tag = "variant" + std::to_string(v);
    auto cpu = make("cpu", tag + "_cpu", false, variants[v]);
    ASSERT_TRUE(cpu && cpu->run().ok());
    auto dev = make(LMT_TRAINER_TEST_BACKEND, tag + "_dev", false, variants[v]);
    ASSERT_TRUE(dev);
    const Status s = dev->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    expect_like_cpu(losses_of(tag + "_cpu"), losses_of(tag + "_dev"));
  }
}

// Mixture-of-experts models on the backend under test: the routing bookkeeping goes through the
// backend's copies, the selection bias lives in its memory and is refreshed after every update and
// on resume. Three expert setups (aux loss with z-loss and capacity drops, DeepSeek-style bias
// updates with a shared expert, every other layer MoE in bf16 with recomputation) train like the
// cpu, and the bias-update run resumed from step 4 equals its uninterrupted run (the bias is in the
// checkpoint; a device copy left stale at resume changes the routing after step 4).
TEST_F(TrainerBackendTest, MixtureOfExpertsTrainLikeCpuAndResumeExactly) {
  const std::vector<std::string> moe = {"model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=32"};
  const std::vector<std::vector<std::string>> variants = {
      {"model.moe.balance=aux_loss", "model.moe.aux_loss_coef=0.01", "model.moe.router_z_loss=0.001",
       "model.moe.capacity_factor=1.0"},
      {"model.moe.balance=bias_update", "model.moe.bias_update_rate=0.01", "model.moe.shared_experts=1",
       "model.moe.router=softmax_topk"},
      {"model.moe.every=2", "train.recompute=true", "train.grad_accum=2"}};
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    std::vector<std::string> extra = moe;
    extra.insert(extra.end(), variants[v].begin(), variants[v].end());
    const std::string tag = "moe" + std::to_string(v);
    auto cpu = make("cpu", tag + "_cpu", false, extra);
    ASSERT_TRUE(cpu && cpu->run().ok());
    auto dev = make(LMT_TRAINER_TEST_BACKEND, tag + "_dev", false, extra);
    ASSERT_TRUE(dev);
    const Status s = dev->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    expect_like_cpu(losses_of(tag + "_cpu"), losses_of(tag + "_dev"));
    if (v != 1) continue;
    auto half = make(LMT_TRAINER_TEST_BACKEND, tag + "_resumed", false, extra);
    ASSERT_TRUE(half && half->run(/*stop_after=*/4).ok());
    half.reset();
    auto rest = make(LMT_TRAINER_TEST_BACKEND, tag + "_resumed", /*resume=*/true, extra);
    ASSERT_TRUE(rest && rest->run().ok());
    const auto full = losses_of(tag + "_dev"), resumed = losses_of(tag + "_resumed");
    ASSERT_EQ(resumed.size(), full.size());
    for (const auto& [key, loss] : full)
      EXPECT_EQ(resumed.at(key), loss) << key << ": the resumed run differs from the uninterrupted one";
  }
}

// Multiple-choice evaluation during training (eval.tasks) runs the KV-cache decoder on the backend
// under test: the accuracies equal the cpu run's on the pretend device (its decoder and kernels see
// the same data), and on a GPU every item is scored.
TEST_F(TrainerBackendTest, EvalTasksScoreLikeCpu) {
  const std::string shared = LMT_SHARED_DATA;
  if (!fs::exists(shared + "/eval/piqa/valid.jsonl")) GTEST_SKIP() << "shared test data not found at " << shared;
  test::write_gpt2_dataset((root_ / "gpt2_data").string(), shared);
  const std::vector<std::string> tasks = {"data.path=" + (root_ / "gpt2_data").string(), "eval.tasks_every=2",
                                          "train.max_steps=2", "eval.every=0"};
  std::map<std::string, nlohmann::json> scored;
  for (const std::string& backend : {std::string("cpu"), std::string(LMT_TRAINER_TEST_BACKEND)}) {
    config::Config c = config::Config::defaults();
    for (const std::string& kv : {std::string("model.n_layers=2"), std::string("model.d_model=32"),
                                  std::string("model.n_heads=4"), std::string("model.n_kv_heads=2"),
                                  std::string("model.head_dim=8"), std::string("model.ffn_hidden=64"),
                                  std::string("model.max_seq_len=128"), std::string("train.micro_batch=2"),
                                  std::string("train.seq_len=64"), std::string("checkpoint.async=false"),
                                  "runtime.backend=" + backend})
      ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
    for (const std::string& kv : tasks) ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
    ASSERT_TRUE(c.set("eval.tasks", std::vector<std::string>{"piqa:" + shared + "/eval/piqa/valid.jsonl:6"}, "test").ok());
    auto recipe = recipe_from_config(c, "test.toml");
    ASSERT_TRUE(recipe.ok()) << recipe.status().ToString();
    auto t = Trainer::create(*recipe, c.to_toml(), (root_ / ("tasks_" + backend)).string(), false);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const Status s = (*t)->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::ifstream in(root_ / ("tasks_" + backend) / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("eval_piqa_acc")) scored[backend] = j;
    }
    ASSERT_TRUE(scored.count(backend)) << backend << ": no eval record";
    EXPECT_EQ(scored[backend]["eval_piqa_items"], 6) << backend;
  }
  if (kExact) {
    for (const char* key : {"eval_piqa_acc", "eval_piqa_acc_norm_token", "eval_piqa_acc_norm_char"})
      EXPECT_EQ(scored[LMT_TRAINER_TEST_BACKEND][key], scored["cpu"][key]) << key;
  }
}

// ZeRO-3 gathers and shards the parameters in host memory: refused on a device backend before
// anything is written (it copied device memory with memcpy before).
TEST_F(TrainerBackendTest, ZeroThreeIsRefusedBeforeAnythingIsWritten) {
  config::Config c = config::Config::defaults();
  for (const std::string& kv : std::vector<std::string>{std::string("runtime.backend=") + LMT_TRAINER_TEST_BACKEND,
                                                        "model.n_layers=1", "train.zero=3",
                                                        "data.path=" + (root_ / "data").string()})
    ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  auto recipe = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(recipe.ok()) << recipe.status().ToString();
  auto t = Trainer::create(*recipe, c.to_toml(), (root_ / "zero3").string(), false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << t.status().ToString();
  EXPECT_NE(t.status().message().find("train.zero = 3"), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().hint().find("train.zero"), std::string::npos) << t.status().ToString();
  EXPECT_FALSE(fs::exists(root_ / "zero3"));
}

// A run that does not fit the device's memory is refused before anything is allocated, naming the
// device (the cuda backend reports its free memory; the pretend device here 64 MiB).
TEST_F(TrainerBackendTest, ARunTooBigForTheDeviceIsRefusedNamingIt) {
  if (!kExact) GTEST_SKIP() << "the pretend device only";
  CpuAsDeviceBackend::memory_bytes = 64.0 * (1 << 20);
  config::Config c = config::Config::defaults();
  for (const std::string& kv : std::vector<std::string>{"runtime.backend=cpu_as_device", "model.n_layers=2",
                                                        "train.micro_batch=256", "train.seq_len=256",
                                                        "data.path=" + (root_ / "data").string()})
    ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  auto recipe = recipe_from_config(c, "test.toml");
  CpuAsDeviceBackend::memory_bytes = 0;
  ASSERT_FALSE(recipe.ok());
  EXPECT_NE(recipe.status().message().find("more than cuda:7 (a pretend device) has (0.1 GiB)"), std::string::npos)
      << recipe.status().ToString();
  EXPECT_NE(recipe.status().message().find("train.micro_batch"), std::string::npos) << recipe.status().ToString();
}

// The pretend device is only a check if host code really cannot reach its memory: a host read of a
// tensor on it crashes, and the backend's own ops (a fill, a copy to the host) work.
TEST(PretendDevice, HostCodeCannotTouchItsMemoryButItsOpsCan) {
  if (!kExact) GTEST_SKIP() << "the pretend device only";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CpuAsDeviceBackend be;
  Tensor t({16}, DType::kF32, be.allocator());
  be.fill(t.view(), 2.5);
  Tensor h({16}, DType::kF32);
  be.copy(h.view(), t.view());
  EXPECT_EQ(h.as<float>()[15], 2.5f);
  // The child dies of the plain SIGSEGV: under ASan its handler would otherwise write a report, which
  // scripts/sanitize.sh counts as a failure although the crash is the expected outcome here.
  EXPECT_DEATH(
      {
        std::signal(SIGSEGV, SIG_DFL);
        h.as<float>()[0] = *static_cast<volatile const float*>(t.as<float>());
      },
      "");
  {
    const test::DeviceAccess open;
    EXPECT_EQ(t.as<float>()[3], 2.5f);
  }
}

}  // namespace
}  // namespace lmt::train
