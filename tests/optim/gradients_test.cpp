// Global-norm clipping against a direct computation, and gradient accumulation's loss scaling on
// the real model: micro-batches weighted by accumulation_loss_scale give the gradient of the whole
// batch's mean loss.
#include "lmt/optim/gradients.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"
#include "model/model_test_util.h"

namespace lmt::optim {
namespace {

TEST(Clipping, GlobalNormMatchesADirectSum) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100'003}}) {  // the last one runs in parallel
    std::vector<float> g(n);
    Rng rng(n);
    double want = 0;
    for (float& x : g) {
      x = static_cast<float>(rng.normal() * 1e-3);
      want += static_cast<double>(x) * x;
    }
    want = std::sqrt(want);
    const TensorView v(g.data(), Shape{n}, DType::kF32);
    for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()})
      EXPECT_NEAR(global_grad_norm(*b, v), want, 1e-12 * want) << b->name() << " n=" << n;
  }
}

TEST(Clipping, Factor) {
  EXPECT_FLOAT_EQ(clip_factor(2.0, 1.0f), static_cast<float>(1.0 / (2.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_factor(10.0, 0.5f), static_cast<float>(0.5 / (10.0 + 1e-6)));
  EXPECT_EQ(clip_factor(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_factor(0.0, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clip_factor(1.0, 1.0f), static_cast<float>(1.0 / (1.0 + 1e-6)));  // as PyTorch: just below 1
  EXPECT_EQ(clip_factor(1e9, 0.0f), 1.0f);                                          // 0 disables
  EXPECT_EQ(clip_factor(1e9, -1.0f), 1.0f);
  EXPECT_TRUE(std::isnan(clip_factor(INFINITY, 1.0f)));
  EXPECT_TRUE(std::isnan(clip_factor(NAN, 1.0f)));
  EXPECT_EQ(clip_factor(NAN, 0.0f), 1.0f);  // clipping off: the factor is 1 regardless
}

TEST(Accumulation, LossScale) {
  EXPECT_FLOAT_EQ(accumulation_loss_scale(3, 12), 0.25f);
  EXPECT_FLOAT_EQ(accumulation_loss_scale(12, 12), 1.0f);
  EXPECT_EQ(accumulation_loss_scale(0, 0), 0.0f);
  EXPECT_EQ(accumulation_loss_scale(0, 5), 0.0f);
}

// Two micro-batches of one row each, every loss scaled by its share of the valid targets, sum to
// the gradient of one batch of both rows (whose mean is over all valid targets together). The rows
// have different numbers of ignored targets, so 1/accum would be wrong here.
TEST(Accumulation, MicroBatchesEqualOneBatch) {
  const model::ModelConfig c = model::testing::tiny_test_config();
  const int64_t T = 8;
  std::vector<int32_t> tokens(2 * T), targets(2 * T);
  Rng rng(3);
  for (int64_t i = 0; i < 2 * T; ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(c.vocab_size));
    targets[i] = static_cast<int32_t>(rng.below(c.vocab_size));
  }
  for (int64_t i : {1, 2, 4, 5, 6}) targets[i] = -100;  // row 0: 3 valid targets, row 1: 8
  const int64_t valid0 = 3, valid1 = 8;

  model::RunOptions o;
  o.compute = DType::kF32;
  model::Transformer whole(c, kernels::cpu_backend()), micro(c, kernels::cpu_backend());
  whole.init(1);
  micro.init(1);
  whole.prepare(2, T, o);
  whole.zero_grads();
  whole.forward(tokens.data(), targets.data(), nullptr, true);
  whole.backward();

  micro.prepare(1, T, o);
  micro.zero_grads();
  for (int64_t r = 0; r < 2; ++r) {
    const float scale = accumulation_loss_scale(r == 0 ? valid0 : valid1, valid0 + valid1);
    micro.forward(tokens.data() + r * T, targets.data() + r * T, nullptr, true, scale);
    micro.backward();
  }
  const float* gw = whole.grads().as<float>();
  const float* gm = micro.grads().as<float>();
  const double norm = global_grad_norm(kernels::cpu_backend(), whole.grads());
  ASSERT_GT(norm, 0.0);
  for (int64_t i = 0; i < whole.layout().total_numel(); ++i) ASSERT_NEAR(gm[i], gw[i], 1e-5 * norm) << i;
}

}  // namespace
}  // namespace lmt::optim
