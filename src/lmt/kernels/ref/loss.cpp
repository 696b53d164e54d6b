// ref: LM head + softmax cross-entropy (+ z-loss), one row at a time in f64.
#include <cmath>
#include <limits>
#include <vector>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::acc;
using ref::ld;
using ref::st;

void RefBackend::lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x,
                                            const TensorView& weight, const TensorView& targets,
                                            const CrossEntropyOptions& opts, const TensorView& dx,
                                            const TensorView& dweight) {
  const int64_t N = x.dim(0), C = x.dim(1), V = opts.vocab_size;
  std::vector<double> logits(V);
  // Row n's logits into `logits`; returns their log-sum-exp.
  auto row_logits = [&](int64_t n) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += ld(x, n * C + c) * ld(weight, v * C + c);
      logits[v] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[v] - mx);
    return mx + std::log(sum);
  };
  // Vocabulary-parallel (opts.combine): every row's local log-sum-exp and target logit first (one
  // chunk of N rows), combined into the whole vocabulary's; then the rows as below with those.
  std::vector<float> lse_g, tl_g;
  if (opts.combine) {
    lse_g.assign(static_cast<size_t>(N), 0.0f);
    tl_g.assign(static_cast<size_t>(N), 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = ref::id(targets, n) - opts.vocab_begin;
      lse_g[n] = static_cast<float>(row_logits(n));
      tl_g[n] = t >= 0 && t < V ? static_cast<float>(logits[t]) : 0.0f;
    }
    opts.combine(0, TensorView(lse_g.data(), Shape{N}, DType::kF32), TensorView(tl_g.data(), Shape{N}, DType::kF32));
  }
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = ref::id(targets, n);
    if (t == opts.ignore_index) {
      st(losses, n, 0.0);
      if (dx.present())
        for (int64_t c = 0; c < C; ++c) st(dx, n * C + c, 0.0);
      continue;
    }
    LMT_CHECK(t >= 0 && (opts.combine || t < V)) << "lm_head_cross_entropy: target " << t << " at row " << n
                                                 << " outside [0, " << V << ")";
    const int64_t tl = t - opts.vocab_begin;  // the target's row here (another rank's if outside [0, V))
    const double local_lse = row_logits(n);
    const double lse = opts.combine ? lse_g[n] : local_lse;
    const double target_logit = opts.combine ? tl_g[n] : logits[t];
    st(losses, n, lse - target_logit + opts.z_loss * lse * lse);
    if (!dx.present() && !dweight.present()) continue;
    // d loss / d logit_v = p_v - [v == t] + 2 z lse p_v
    for (int64_t v = 0; v < V; ++v) {
      double p = std::exp(logits[v] - lse);
      logits[v] = (p * (1.0 + 2.0 * opts.z_loss * lse) - (v == tl ? 1.0 : 0.0)) * opts.grad_scale;
    }
    if (dx.present())
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t v = 0; v < V; ++v) s += logits[v] * ld(weight, v * C + c);
        st(dx, n * C + c, s);
      }
    if (dweight.present())
      for (int64_t v = 0; v < V; ++v)
        for (int64_t c = 0; c < C; ++c) acc(dweight, v * C + c, logits[v] * ld(x, n * C + c));
  }
}

}  // namespace lmt::kernels
