// The model on the GPU (ctest label "gpu"): stories260K's reference logits through the cuda backend,
// and training steps on cuda against the same steps on cpu (fp32 and bf16). Skips, with the reason,
// where no GPU is visible or the shared test data is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "lmt/base/rng.h"
#include "lmt/dist/communicator.h"
#include "lmt/dist/topology.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/hf_checkpoint.h"
#include "lmt/model/transformer.h"
#include "lmt/train/data_parallel.h"
#include "lmt/train/step_engine.h"

namespace lmt {
namespace {

// LMT_SHARED_DATA in the environment wins (a GPU machine may hold the data elsewhere).
std::string shared_data() {
  if (const char* e = std::getenv("LMT_SHARED_DATA"); e != nullptr && *e != '\0') return e;
  return LMT_SHARED_DATA;
}

using gpu_test::cuda;

// stories260K (Llama with GQA, tied embeddings): the reference logits of its 32 reference ids.
TEST(CudaModel, Stories260KLogitsMatchReference) {
  SKIP_WITHOUT_GPU();
  const std::string dir = shared_data() + "/models/stories260K";
  if (!std::filesystem::exists(dir + "/reference.json")) GTEST_SKIP() << "no shared test data at " << dir;
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto config = model::config_from_hf(dir + "/hf/config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  model::Transformer m(*config, *cuda());
  std::vector<float> host(static_cast<size_t>(m.layout().total_numel()));
  ASSERT_TRUE(model::load_hf_weights(dir + "/hf/model.safetensors", m.layout(), host.data()).ok());
  cuda()->copy(m.params(), TensorView(host.data(), Shape{m.layout().total_numel()}, DType::kF32));
  const std::vector<int32_t> ids = ref["input_ids"].get<std::vector<int32_t>>();
  const int64_t T = static_cast<int64_t>(ids.size()), V = config->vocab_size;
  model::RunOptions o;
  o.compute = DType::kF32;
  m.prepare(1, T, o);
  Tensor logits_dev({T, V}, DType::kF32, cuda()->allocator()), logits({T, V}, DType::kF32);
  m.logits(ids.data(), nullptr, logits_dev);
  cuda()->copy(logits, logits_dev);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(logits.as<float>()[t * V + v] - ref["logits"][t][v].get<double>()));
  EXPECT_LT(worst, 1e-4) << "max |logit - reference| on cuda";
}

model::ModelConfig small(bool llama) {
  model::ModelConfig c = *model::preset(llama ? "tiny" : "gpt2-124m");
  c.vocab_size = 512;
  c.max_seq_len = 128;
  c.n_layers = 2;
  c.d_model = 128;
  c.n_heads = 4;
  c.n_kv_heads = llama ? 2 : 4;
  c.head_dim = 32;
  c.ffn_hidden = 256;
  return c;
}

class Batches final : public train::MicroBatchSource {
 public:
  Batches(int n, int64_t B, int64_t T, int64_t V) {
    Rng rng(5);
    for (int i = 0; i < n; ++i) {
      data::Batch b;
      b.B = B, b.T = T;
      // A learnable pattern (next token = previous + 1 mod V, with noise), so the loss falls.
      for (int64_t j = 0; j < B * T; ++j) {
        const int32_t tok = static_cast<int32_t>(rng.below(4) == 0 ? rng.below(V) : (j * 7) % V);
        b.tokens.push_back(tok);
        b.targets.push_back(static_cast<int32_t>((tok + 1) % V));
      }
      batches_.push_back(std::move(b));
    }
  }
  StatusOr<const data::Batch*> next() override { return &batches_[static_cast<size_t>(i_++) % batches_.size()]; }

 private:
  std::vector<data::Batch> batches_;
  int64_t i_ = 0;
};

// Losses of `steps` AdamW steps of a fresh model (seed 1) on `be`.
std::vector<double> train_losses(kernels::Backend& be, const model::ModelConfig& config, DType compute, int steps) {
  model::Transformer m(config, be);
  m.init(1);
  model::RunOptions o;
  o.compute = compute;
  const int64_t B = 4, T = 64;
  m.prepare(B, T, o);
  auto comm = dist::make_communicator();
  EXPECT_TRUE(comm.ok());
  auto sizes = dist::sizes_for_world((*comm)->world());
  auto topo = dist::Topology::create(**comm, *sizes);
  optim::OptimizerConfig oc;
  oc.name = "adamw";
  oc.lr = 3e-3f;
  train::DataParallel dp((*topo)->dp(), m.layout(), oc, 0, 0);
  train::StepEngineConfig ec;
  ec.grad_clip = 1.0f;
  auto engine = train::StepEngine::create(m, dp, oc, ec);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  Batches source(4, B, T, config.vocab_size);
  std::vector<double> losses;
  for (int s = 1; s <= steps; ++s) {
    train::StepResult r;
    const Status st = (*engine)->step(source, train::StepOptions{}, 1.0f, s, &r);
    EXPECT_TRUE(st.ok()) << st.ToString();
    losses.push_back(r.loss);
  }
  return losses;
}

// Each step's loss within rtol·|cpu| + atol of the cpu backend's. Once the pattern is learnt (loss
// near 0.05 by step 46) a relative bound alone is ill-conditioned, so bf16 adds atol = 5e-3 nats: an
// H100 run with the FlashAttention-2 kernels differed by 2.0e-3 at step 46 (4.2% of that loss, every
// other step within 2%), when the cpu backend still computed attention in f32 (it rounds to bf16 as
// the GPU does since, on CPUs with AVX512-BF16).
void expect_same_training(bool llama, DType compute, int steps, double rtol, double atol = 0) {
  const model::ModelConfig c = small(llama);
  const std::vector<double> cpu = train_losses(kernels::backend("cpu"), c, compute, steps);
  const std::vector<double> gpu = train_losses(*cuda(), c, compute, steps);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], rtol * std::abs(cpu[i]) + atol) << "step " << i + 1 << (llama ? " llama" : " gpt2");
  EXPECT_LT(gpu.back(), gpu.front() - 0.5) << "the GPU run did not learn the pattern";
}

TEST(CudaModel, FiftyBf16StepsMatchCpuLlama) {
  SKIP_WITHOUT_GPU();
  expect_same_training(true, DType::kBF16, 50, 2e-2, 5e-3);
}

TEST(CudaModel, FiftyBf16StepsMatchCpuGpt2) {
  SKIP_WITHOUT_GPU();
  expect_same_training(false, DType::kBF16, 50, 2e-2, 5e-3);
}

TEST(CudaModel, TenFp32StepsMatchCpuClosely) {
  SKIP_WITHOUT_GPU();
  expect_same_training(true, DType::kF32, 10, 1e-3);
  expect_same_training(false, DType::kF32, 10, 1e-3);
}

}  // namespace
}  // namespace lmt
