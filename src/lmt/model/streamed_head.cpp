// streamed_lm_head_loss: see streamed_head.h.
#include "lmt/model/streamed_head.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/check.h"

namespace lmt::model {

void streamed_lm_head_loss(kernels::Backend& b, StreamedVocab& vocab, int64_t vocab_size, const TensorView& losses,
                           const TensorView& x, const TensorView& targets, kernels::CrossEntropyOptions opts,
                           const TensorView& dx, StreamedHeadScratch& s) {
  const int64_t N = x.dim(0), C = x.dim(1), V = vocab_size, R = vocab.head_chunk_rows();
  LMT_CHECK(R >= 1 && V >= 1) << "streamed LM head: " << V << " vocabulary rows in chunks of " << R;
  const int64_t K = (V + R - 1) / R;
  const bool train = dx.present();
  s.lse.assign(static_cast<size_t>(N), -INFINITY);
  s.target_logit.assign(static_cast<size_t>(N), 0.0f);
  if (train && K > 1 && (!s.dx.view().present() || s.dx.numel() != N * C)) s.dx = Tensor({N, C}, DType::kF32);

  // A chunk's statistics into the running ones (log-sum-exp in f64; the target logit is the one
  // chunk's that holds the target, 0 from the others).
  auto fold = [&s](int64_t row0, int64_t rows, const float* lse, const float* tl) {
    for (int64_t r = 0; r < rows; ++r) {
      double& run = s.lse[static_cast<size_t>(row0 + r)];
      const double a = run, c = lse[r], m = std::max(a, c);
      run = std::isinf(m) ? m : m + std::log(std::exp(a - m) + std::exp(c - m));
      s.target_logit[static_cast<size_t>(row0 + r)] += tl[r];
    }
  };
  auto whole = [&s](int64_t row0, int64_t rows, float* lse, float* tl) {
    for (int64_t r = 0; r < rows; ++r) {
      lse[r] = static_cast<float>(s.lse[static_cast<size_t>(row0 + r)]);
      tl[r] = s.target_logit[static_cast<size_t>(row0 + r)];
    }
  };
  auto part = [&](int64_t k) {
    kernels::CrossEntropyOptions o = opts;
    o.vocab_begin = k * R;
    o.vocab_size = std::min(R, V - k * R);
    return o;
  };

  for (int64_t k = 0; k < K; ++k) {  // pass 1
    const bool last = k + 1 == K;
    const TensorView w = vocab.head_rows(k, !last ? k + 1 : (train && K > 1 ? K - 2 : -1));
    kernels::CrossEntropyOptions o = part(k);
    if (!last) {
      o.combine = [&fold](int64_t row0, const TensorView& lse, const TensorView& tl) {
        fold(row0, lse.numel(), lse.as<float>(), tl.as<float>());
      };
      b.lm_head_cross_entropy(losses, x, w, targets, o, TensorView(), TensorView());
      continue;
    }
    o.combine = [&](int64_t row0, const TensorView& lse, const TensorView& tl) {
      fold(row0, lse.numel(), lse.as<float>(), tl.as<float>());
      whole(row0, lse.numel(), lse.as<float>(), tl.as<float>());
    };
    if (!train) {
      b.lm_head_cross_entropy(losses, x, w, targets, o, TensorView(), TensorView());
      continue;
    }
    b.lm_head_cross_entropy(losses, x, w, targets, o, dx, vocab.head_grad(k));
    vocab.head_grad_ready(k);
  }
  if (!train) return;
  for (int64_t k = K - 2; k >= 0; --k) {  // pass 2: the other chunks' gradients
    const TensorView w = vocab.head_rows(k, k - 1);
    kernels::CrossEntropyOptions o = part(k);
    o.combine = [&whole](int64_t row0, const TensorView& lse, const TensorView& tl) {
      whole(row0, lse.numel(), lse.as<float>(), tl.as<float>());
    };
    b.lm_head_cross_entropy(losses, x, w, targets, o, s.dx.view(), vocab.head_grad(k));
    vocab.head_grad_ready(k);
    b.add(dx, dx, s.dx.view());
  }
}

}  // namespace lmt::model
