// lm_head_cross_entropy's vocabulary-parallel form (CrossEntropyOptions::vocab_begin, combine) on
// the cpu and ref backends, in one process: the vocabulary split in two halves, each half's call
// combining with the other half's row statistics (captured by a first pass of that half), gives
// the whole vocabulary's losses, its dweight rows for each half, and dx as the sum of the halves' —
// with z-loss, an ignored target, padding rows past the vocabulary and several chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

Tensor randn(Shape s, uint64_t seed, float scale) {
  Tensor t(s, DType::kF32);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = scale * static_cast<float>(rng.normal());
  return t;
}

TEST(VocabParallelLoss, TwoHalvesGiveTheWholeVocabulary) {
  const int64_t N = 37, C = 24, V = 61, Vp = 64, half = Vp / 2;  // rows 61..63 of the second half: padding
  for (Backend* be : {&cpu_backend(), &ref_backend()}) {
    SCOPED_TRACE(std::string(be->name()));
    const Tensor x = randn({N, C}, 1, 1.0f), w = randn({Vp, C}, 2, 0.5f);
    Tensor targets({N}, DType::kI32);
    Rng rng(3);
    for (int64_t n = 0; n < N; ++n) targets.as<int32_t>()[n] = static_cast<int32_t>(rng.below(V));
    targets.as<int32_t>()[5] = -100;
    CrossEntropyOptions whole;
    whole.vocab_size = V;
    whole.z_loss = 1e-3f;
    whole.grad_scale = 0.25f;
    whole.chunk_rows = 16;
    Tensor loss({N}, DType::kF32), dx({N, C}, DType::kF32), dw({Vp, C}, DType::kF32);
    be->lm_head_cross_entropy(loss, x, w, targets, whole, dx, dw);

    // Pass 1: each half's own statistics, captured per row (combine leaves them as they are).
    std::vector<float> lse[2], tl[2];
    auto opts_of = [&](int h) {
      CrossEntropyOptions o = whole;
      o.vocab_begin = h * half;
      o.vocab_size = h == 0 ? half : V - half;
      return o;
    };
    for (int h = 0; h < 2; ++h) {
      lse[h].assign(N, 0.0f);
      tl[h].assign(N, 0.0f);
      CrossEntropyOptions o = opts_of(h);
      o.combine = [&, h](int64_t row0, int64_t rows, float* l, float* t) {
        for (int64_t r = 0; r < rows; ++r) lse[h][row0 + r] = l[r], tl[h][row0 + r] = t[r];
      };
      Tensor l({N}, DType::kF32);
      be->lm_head_cross_entropy(l, x, w.view().slice_rows(h * half, (h + 1) * half), targets, o, TensorView(), TensorView());
    }
    // Pass 2: each half combined with both halves' statistics.
    Tensor dx_sum({N, C}, DType::kF32);
    for (int h = 0; h < 2; ++h) {
      CrossEntropyOptions o = opts_of(h);
      o.combine = [&](int64_t row0, int64_t rows, float* l, float* t) {
        for (int64_t r = 0; r < rows; ++r) {
          const double a = lse[0][row0 + r], b = lse[1][row0 + r], m = std::max(a, b);
          l[r] = static_cast<float>(m + std::log(std::exp(a - m) + std::exp(b - m)));
          t[r] = tl[0][row0 + r] + tl[1][row0 + r];
        }
      };
      Tensor l({N}, DType::kF32), dxh({N, C}, DType::kF32), dwh({half, C}, DType::kF32);
      be->lm_head_cross_entropy(l, x, w.view().slice_rows(h * half, (h + 1) * half), targets, o, dxh, dwh);
      for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(l.as<float>()[n], loss.as<float>()[n], 2e-5) << "half " << h << " row " << n;
      for (int64_t i = 0; i < half * C; ++i)
        EXPECT_NEAR(dwh.as<float>()[i], dw.as<float>()[h * half * C + i], 2e-6) << "half " << h << " dweight " << i;
      for (int64_t i = 0; i < N * C; ++i) dx_sum.as<float>()[i] += dxh.as<float>()[i];
    }
    for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(dx_sum.as<float>()[i], dx.as<float>()[i], 2e-6) << "dx " << i;
    EXPECT_EQ(loss.as<float>()[5], 0.0f);
  }
}

}  // namespace
}  // namespace lmt::kernels
