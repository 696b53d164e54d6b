// Rotary position embedding of one (i, i + rotary_dim/2) pair, as kernels/cuda/rope.cu computes it:
// the angle, cos, sin, the attention scaling and the rotation all in f64, as the ref backend does,
// so the f32 results agree to the last bit or so at any position.
#pragma once

#include <cmath>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

// Scaled cos and sin of pos·inv_freq (negated angle for the inverse rotation = the transpose).
LMT_HD void rope_cos_sin(double pos, double inv_freq, double scaling, bool inverse, double& c, double& s) {
  const double angle = pos * inv_freq * (inverse ? -1.0 : 1.0);
  c = scaling * cos(angle);
  s = scaling * sin(angle);
}

// (x1, x2) -> (x1·c - x2·s, x2·c + x1·s), rounded to f32 once.
LMT_HD void rope_rotate(float x1, float x2, double c, double s, float& o1, float& o2) {
  const double a = x1, b = x2;
  o1 = static_cast<float>(a * c - b * s);
  o2 = static_cast<float>(b * c + a * s);
}

}  // namespace lmt::kernels::cuda_math
