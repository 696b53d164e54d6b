// The AdamW update of one element, as kernels/cuda/elementwise.cu applies it (f32 arithmetic; the ref
// backend's loop in f64 is the oracle within f32 rounding).
#pragma once

#include <cmath>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

// Constants of one update, computed once on the host: bias corrections in f64 as ref does.
struct AdamWConsts {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float inv_bc1;       // 1 / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
};

// Updates w, m, v in place from gradient g.
LMT_HD void adamw_element(const AdamWConsts& c, float g, float& w, float& m, float& v) {
  g *= c.grad_scale;
  m = c.beta1 * m + (1.0f - c.beta1) * g;
  v = c.beta2 * v + (1.0f - c.beta2) * g * g;
  const float mhat = m * c.inv_bc1;
  const float denom = sqrtf(v) * c.inv_sqrt_bc2 + c.eps;
  w -= c.lr * (mhat / denom + c.weight_decay * w);
}

}  // namespace lmt::kernels::cuda_math
