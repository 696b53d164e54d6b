// Load balancing works (issue #18): a small MoE model (top-2 of 8 experts, 2 MoE layers) trained
// with AdamW on a real corpus (tinyshakespeare as bytes) routes more evenly with the aux loss or the
// DeepSeek-V3 bias update than without balancing. The measure is the max/mean expert load of each MoE
// layer (1 = uniform; 4 = every token's top-2 includes one expert), averaged over the last 20 of 400
// steps (the worse layer of the two).
// Measured (cpu, f32, seeds below): none 3.70 (the router collapses onto one expert), aux loss
// (coef 0.01) 1.43, bias update (rate 1e-3) 1.43; at 150 steps they were 3.89 / 3.33 / 3.73, at 300
// 3.61 / 1.62 / 1.43, so 400 steps is where both have converged. Uniform routing itself measures
// ~1.15-1.2 here (sampling noise of 512 slots over 8 experts: max of 8 loads of mean 64, sd ~7.5).
// Thresholds: balanced < 1.8 (25% above the measured 1.43; a rounding-level change of routing from
// thread counts cannot move a 20-step mean that far), unbalanced > 3.0, so the test cannot pass by a
// model that never collapses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/shared_data.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"

namespace lmt::model {
namespace {

const std::string kCorpus = LMT_SHARED_DATA "/corpora/tinyshakespeare.txt";
constexpr int64_t kSteps = 400, kWindow = 20, kB = 4, kT = 64;

ModelConfig balance_config(MoeBalance balance) {
  ModelConfig c = *preset("tiny");
  c.vocab_size = 256;
  c.max_seq_len = kT;
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_hidden = 64;
  c.qk_norm = false;
  c.attn_bias = c.attn_out_bias = c.mlp_bias = false;
  c.moe.num_experts = 8;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 32;
  c.moe.every = 1;
  c.moe.balance = balance;
  c.moe.aux_loss_coef = 0.01f;     // the MoeConfig defaults
  c.moe.bias_update_rate = 1e-3f;
  return c;
}

// Mean over the last kWindow steps of the worst layer's max/mean load.
double train_and_measure(MoeBalance balance, const std::string& text) {
  const ModelConfig c = balance_config(balance);
  kernels::Backend& be = kernels::cpu_backend();
  Transformer m(c, be);
  m.init(1);
  RunOptions o;
  o.compute = DType::kF32;
  m.prepare(kB, kT, o);
  const int64_t n = m.params().numel();
  Tensor mom({n}, DType::kF32), var({n}, DType::kF32);
  be.fill(mom, 0.0);
  be.fill(var, 0.0);
  Rng rng(42);
  std::vector<int32_t> tokens(kB * kT), targets(kB * kT);
  double sum = 0;
  for (int64_t step = 1; step <= kSteps; ++step) {
    for (int64_t b = 0; b < kB; ++b) {
      const int64_t at = static_cast<int64_t>(rng.below(text.size() - kT - 1));
      for (int64_t t = 0; t < kT; ++t) {
        tokens[b * kT + t] = static_cast<unsigned char>(text[at + t]);
        targets[b * kT + t] = static_cast<unsigned char>(text[at + t + 1]);
      }
    }
    m.zero_grads();
    m.forward(tokens.data(), targets.data(), nullptr, true);
    m.backward();
    double worst = 0;
    for (int64_t l = 0; l < c.n_layers; ++l) worst = std::max(worst, m.moe_stats()[l].imbalance());
    if (step > kSteps - kWindow) sum += worst;
    kernels::AdamWParams p;
    p.lr = 3e-3f;
    p.step = step;
    be.adamw_update(m.params(), m.grads(), mom, var, TensorView(), p);
    m.update_router_bias();
  }
  return sum / kWindow;
}

TEST(MoeBalance, AuxLossAndBiasUpdateBalanceTheLoad) {
  LMT_SKIP_WITHOUT_SHARED("corpora/tinyshakespeare.txt");
  std::ifstream in(kCorpus, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << kCorpus;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const double none = train_and_measure(MoeBalance::kNone, text);
  const double aux = train_and_measure(MoeBalance::kAuxLoss, text);
  const double bias = train_and_measure(MoeBalance::kBiasUpdate, text);
  std::printf("max/mean expert load, last %lld of %lld steps (worst layer): none %.3f, aux loss %.3f, bias update %.3f\n",
              static_cast<long long>(kWindow), static_cast<long long>(kSteps), none, aux, bias);
  EXPECT_GT(none, 3.0) << "without balancing the router should collapse (measured 3.70)";
  EXPECT_LT(aux, 1.8) << "aux loss (measured 1.43)";
  EXPECT_LT(bias, 1.8) << "bias update (measured 1.43)";
  EXPECT_LT(aux, none / 2);
  EXPECT_LT(bias, none / 2);
}

}  // namespace
}  // namespace lmt::model
