// Softmax cross-entropy (+ PaLM z-loss) of one logit row, as kernels/cuda/loss.cu's row kernel
// computes it in f32 (the ref backend's f64 loop is the oracle):
//   (m, s): running max and Σ exp(logit - m), one pair per thread, merged across the block;
//   lse = m + log(s);  loss = lse - logit[target] + z·lse²;
//   dlogit_v = grad_scale · (exp(logit_v - lse)·(1 + 2·z·lse) - [v == target]).
#pragma once

#include <cmath>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

// Adds one logit to a running (max, sum). Start from (-inf, 0). A NaN logit makes s NaN (kept).
LMT_HD void ce_online_update(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}

// Merges another running pair into (m, s). Symmetric bit for bit (max and a sum of two products),
// so every lane of an xor-butterfly ends with the same pair. Two empty pairs stay empty.
LMT_HD void ce_online_merge(float& m, float& s, float m2, float s2) {
  const float mx = m > m2 ? m : m2;
  if (mx == -INFINITY) return;
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

LMT_HD float ce_lse(float m, float s) { return m + logf(s); }

LMT_HD float ce_loss(float lse, float logit_target, float z_loss) { return lse - logit_target + z_loss * lse * lse; }

// d loss / d logit = p·(1 + 2·z·lse) - onehot: the factor is per row.
LMT_HD float ce_grad_factor(float lse, float z_loss) { return 1.0f + 2.0f * z_loss * lse; }

LMT_HD float ce_dlogit(float logit, float lse, float factor, bool is_target, float grad_scale) {
  return (expf(logit - lse) * factor - (is_target ? 1.0f : 0.0f)) * grad_scale;
}

}  // namespace lmt::kernels::cuda_math
