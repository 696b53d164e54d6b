// The host-testable math of kernels/cuda/elementwise.cu (kernels/cuda/math): the f32 -> bf16 rounding
// the GPU uses against base/bf16.h bit for bit, and the AdamW element update against the ref backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "lmt/base/bf16.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/cuda/math/adamw_math.h"
#include "lmt/kernels/cuda/math/bf16_math.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels::cuda_math {
namespace {

TEST(CudaMathBf16, RoundsExactlyLikeBaseBf16) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> vals = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, -nan, 3.4028235e38f, 1e-45f,
                             1.00390625f, 1.01171875f, 65504.0f, -2.5e-39f};
  Rng rng(3);
  for (int i = 0; i < 100000; ++i) vals.push_back(static_cast<float>(rng.normal()) * std::ldexp(1.0f, static_cast<int>(rng.below(80)) - 40));
  for (float v : vals) {
    EXPECT_EQ(bf16_round(v), bf16(v).bits) << v;
    EXPECT_EQ(f32_bits(bf16_to_f32(bf16_round(v))), f32_bits(static_cast<float>(bf16(v)))) << v;
  }
}

TEST(CudaMathAdamW, ElementUpdateMatchesRefBackend) {
  const int64_t n = 4096;
  Tensor w({n}, DType::kF32), g({n}, DType::kF32), m({n}, DType::kF32), v({n}, DType::kF32);
  Rng rng(7);
  for (int64_t i = 0; i < n; ++i) {
    w.as<float>()[i] = static_cast<float>(rng.normal());
    g.as<float>()[i] = static_cast<float>(rng.normal() * 0.1);
    m.as<float>()[i] = static_cast<float>(rng.normal() * 0.01);
    v.as<float>()[i] = static_cast<float>(std::abs(rng.normal()) * 1e-3);
  }
  std::vector<float> hw(w.as<float>(), w.as<float>() + n), hm(m.as<float>(), m.as<float>() + n),
      hv(v.as<float>(), v.as<float>() + n);
  AdamWParams p;
  p.lr = 3e-3f, p.weight_decay = 0.1f, p.step = 7, p.grad_scale = 0.5f;
  kernels::backend("ref").adamw_update(w, g, m, v, TensorView(), p);
  // The constants exactly as elementwise.cu derives them on the host.
  AdamWConsts c{p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale,
                static_cast<float>(1.0 / (1.0 - std::pow(double{p.beta1}, double(p.step)))),
                static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{p.beta2}, double(p.step))))};
  for (int64_t i = 0; i < n; ++i) {
    adamw_element(c, g.as<float>()[i], hw[i], hm[i], hv[i]);
    EXPECT_NEAR(hw[i], w.as<float>()[i], 1e-6 + 1e-5 * std::abs(w.as<float>()[i])) << i;
    EXPECT_NEAR(hm[i], m.as<float>()[i], 1e-7 + 1e-5 * std::abs(m.as<float>()[i])) << i;
    EXPECT_NEAR(hv[i], v.as<float>()[i], 1e-9 + 1e-5 * std::abs(v.as<float>()[i])) << i;
  }
}

}  // namespace
}  // namespace lmt::kernels::cuda_math
