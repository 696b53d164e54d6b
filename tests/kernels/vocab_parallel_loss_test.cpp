// lm_head_cross_entropy's vocabulary-parallel form (CrossEntropyOptions::vocab_begin, combine) in
// one process: the vocabulary split in two halves, each half's call combining with the other half's
// row statistics (captured by a first pass of that half), gives the whole vocabulary's losses, its
// dweight rows for each half, and dx as the sum of the halves' — with z-loss, an ignored target,
// padding rows past the vocabulary and several chunks. The combine reads and writes the statistics
// through the backend's copy (they live in its memory: device memory on a GPU).
//
// This binary tests the cpu and ref backends; cuda_vocab_parallel_loss_test (ctest label gpu) is
// this source with LMT_VOCAB_PARALLEL_TEST_BACKEND "cuda" and skips, saying why, where no GPU is
// visible. There it also runs with bf16 operands, against the same backend's whole vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "backend_under_test.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

#ifndef LMT_VOCAB_PARALLEL_TEST_BACKEND
#define LMT_VOCAB_PARALLEL_TEST_BACKEND "cpu"
#endif

namespace lmt::kernels {
namespace {

constexpr std::string_view kBackend = LMT_VOCAB_PARALLEL_TEST_BACKEND;

std::vector<float> randn(int64_t n, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  Rng rng(seed);
  for (float& x : v) x = scale * static_cast<float>(rng.normal());
  return v;
}

Tensor upload(Backend& be, const std::vector<float>& v, Shape s, DType dt) {
  Tensor f32(s, DType::kF32, be.allocator());
  be.copy(f32, TensorView(const_cast<float*>(v.data()), s, DType::kF32));
  if (dt == DType::kF32) return f32;
  Tensor t(s, dt, be.allocator());
  be.convert(t, f32);
  return t;
}

std::vector<float> download(Backend& be, const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.copy(TensorView(v.data(), Shape{t.numel()}, DType::kF32), t.reshape({t.numel()}));
  return v;
}

// The backends this binary tests: cpu and ref, or the one it was built for.
std::vector<std::string_view> backends() {
  if (kBackend == "cpu") return {"cpu", "ref"};
  return {kBackend};
}

// Split into halves of Vp / 2 rows, the tolerances tol (losses) and gtol (gradients).
void two_halves_give_the_whole_vocabulary(Backend& be, DType dt, double tol, double gtol) {
  const int64_t N = 37, C = 24, V = 61, Vp = 64, half = Vp / 2;  // rows 61..63 of the second half: padding
  const Tensor x = upload(be, randn(N * C, 1, 1.0f), {N, C}, dt);
  const Tensor w = upload(be, randn(Vp * C, 2, 0.5f), {Vp, C}, dt);
  std::vector<int32_t> ids(static_cast<size_t>(N));
  Rng rng(3);
  for (int32_t& t : ids) t = static_cast<int32_t>(rng.below(V));
  ids[5] = -100;
  Tensor targets({N}, DType::kI32, be.allocator());
  be.copy(targets, TensorView(ids.data(), Shape{N}, DType::kI32));
  CrossEntropyOptions whole;
  whole.vocab_size = V;
  whole.z_loss = 1e-3f;
  whole.grad_scale = 0.25f;
  whole.chunk_rows = 16;
  Tensor loss({N}, DType::kF32, be.allocator()), dx({N, C}, DType::kF32, be.allocator());
  Tensor dw({Vp, C}, DType::kF32, be.allocator());
  be.fill(dw, 0.0);
  be.lm_head_cross_entropy(loss, x, w, targets, whole, dx, dw);
  const std::vector<float> loss_h = download(be, loss), dx_h = download(be, dx), dw_h = download(be, dw);

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
    o.combine = [&, h](int64_t row0, const TensorView& l, const TensorView& t) {
      const std::vector<float> lh = download(be, l), th = download(be, t);
      for (size_t r = 0; r < lh.size(); ++r) lse[h][row0 + r] = lh[r], tl[h][row0 + r] = th[r];
    };
    Tensor l({N}, DType::kF32, be.allocator());
    be.lm_head_cross_entropy(l, x, w.view().slice_rows(h * half, (h + 1) * half), targets, o, TensorView(), TensorView());
  }
  // Pass 2: each half combined with both halves' statistics.
  std::vector<float> dx_sum(static_cast<size_t>(N * C), 0.0f);
  for (int h = 0; h < 2; ++h) {
    CrossEntropyOptions o = opts_of(h);
    o.combine = [&](int64_t row0, const TensorView& l, const TensorView& t) {
      std::vector<float> lh(static_cast<size_t>(l.numel())), th(lh.size());
      for (size_t r = 0; r < lh.size(); ++r) {
        const double a = lse[0][row0 + r], b = lse[1][row0 + r], m = std::max(a, b);
        lh[r] = static_cast<float>(m + std::log(std::exp(a - m) + std::exp(b - m)));
        th[r] = tl[0][row0 + r] + tl[1][row0 + r];
      }
      be.copy(l, TensorView(lh.data(), l.shape(), DType::kF32));
      be.copy(t, TensorView(th.data(), t.shape(), DType::kF32));
    };
    Tensor l({N}, DType::kF32, be.allocator()), dxh({N, C}, DType::kF32, be.allocator());
    Tensor dwh({half, C}, DType::kF32, be.allocator());
    be.fill(dwh, 0.0);
    be.lm_head_cross_entropy(l, x, w.view().slice_rows(h * half, (h + 1) * half), targets, o, dxh, dwh);
    const std::vector<float> l_h = download(be, l), dxh_h = download(be, dxh), dwh_h = download(be, dwh);
    for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(l_h[n], loss_h[n], tol) << "half " << h << " row " << n;
    for (int64_t i = 0; i < half * C; ++i)
      EXPECT_NEAR(dwh_h[i], dw_h[h * half * C + i], gtol) << "half " << h << " dweight " << i;
    for (int64_t i = 0; i < N * C; ++i) dx_sum[i] += dxh_h[i];
  }
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(dx_sum[i], dx_h[i], gtol) << "dx " << i;
  EXPECT_EQ(loss_h[5], 0.0f);
}

TEST(VocabParallelLoss, TwoHalvesGiveTheWholeVocabulary) {
  LMT_SKIP_WITHOUT_BACKEND(kBackend);
  for (std::string_view name : backends()) {
    SCOPED_TRACE(std::string(name));
    Backend* be = testing::backend_or_null(name);
    ASSERT_NE(be, nullptr) << name;
    two_halves_give_the_whole_vocabulary(*be, DType::kF32, 2e-5, 2e-6);
  }
}

// bf16 operands: the halves' logits are the same products as the whole's, so they agree as closely
// (the dlogits' bf16 rounding may differ by one unit where the whole's lse differs in its last bit).
TEST(VocabParallelLoss, TwoHalvesGiveTheWholeVocabularyInBf16) {
  LMT_SKIP_WITHOUT_BACKEND(kBackend);
  Backend* be = testing::backend_or_null(kBackend);
  two_halves_give_the_whole_vocabulary(*be, DType::kBF16, 2e-5, 2e-3);
}

}  // namespace
}  // namespace lmt::kernels
