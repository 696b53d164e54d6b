// The host-testable math of kernels/cuda/moe.cu (kernels/cuda/math/moe_math.h) in loops shaped like
// its kernels — a router row per thread, a combined element per thread, a d weights dot product per
// warp (32 lane partials, then the xor butterfly) — against the ref backend's MoE ops. The router and
// the combine accumulate in f64 in the host loops' order, so they must give the ref's bits exactly;
// the warp's dot product within f64 rounding. Cases: ties (equal logits), a selection bias, with and
// without renormalisation, the aux loss's d probs and the z-loss term, dropped slots.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/backend.h"
#include "lmt/kernels/cuda/math/moe_math.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels::cuda_math {
namespace {

Backend& ref() { return backend("ref"); }

Tensor normal(Shape s, Rng& rng, double scale) {
  Tensor t(s, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = static_cast<float>(rng.normal() * scale);
  return t;
}

template <typename T>
void expect_bits(const T* got, const T* want, int64_t n, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " differ";
}

struct RouterCase {
  int64_t N, E, K;
  bool renormalize, bias, ties;
};

TEST(CudaMathMoe, RouterRowsEqualTheRefBackendBitForBit) {
  Rng rng(11);
  for (const RouterCase& c : {RouterCase{37, 8, 2, true, false, false}, RouterCase{64, 16, 4, false, true, false},
                              RouterCase{9, 4, 4, true, true, true}, RouterCase{50, 64, 6, false, false, true},
                              RouterCase{5, 3, 1, true, false, false}}) {
    const std::string what = "N" + std::to_string(c.N) + " E" + std::to_string(c.E) + " K" + std::to_string(c.K);
    SCOPED_TRACE(what);
    Tensor logits = normal({c.N, c.E}, rng, 1.5);
    if (c.ties)  // pairs of equal logits: the lower expert index must win
      for (int64_t i = 1; i < logits.numel(); i += 2) logits.as<float>()[i] = logits.as<float>()[i - 1];
    Tensor bias = c.bias ? normal({c.E}, rng, 0.05) : Tensor();
    // Forward: the ref op, then every row as a kernel thread runs it.
    Tensor w({c.N, c.K}, DType::kF32), ex({c.N, c.K}, DType::kI32), p({c.N, c.E}, DType::kF32), lse({c.N}, DType::kF32);
    ref().moe_router_forward(w, ex, p, lse, logits, bias, c.renormalize);
    std::vector<float> gw(static_cast<size_t>(c.N * c.K)), gp(static_cast<size_t>(c.N * c.E)), gl(static_cast<size_t>(c.N));
    std::vector<int32_t> gex(static_cast<size_t>(c.N * c.K), -7);
    for (int64_t n = 0; n < c.N; ++n)
      moe_router_row_forward(logits.as<float>() + n * c.E, c.bias ? bias.as<float>() : nullptr, c.E, c.K,
                             c.renormalize, gp.data() + n * c.E, gl.data() + n, gex.data() + n * c.K,
                             gw.data() + n * c.K);
    expect_bits(gex.data(), ex.as<int32_t>(), c.N * c.K, "experts");
    expect_bits(gp.data(), p.as<float>(), c.N * c.E, "probs");
    expect_bits(gl.data(), lse.as<float>(), c.N, "lse");
    expect_bits(gw.data(), w.as<float>(), c.N * c.K, "weights");
    // Backward, with the aux loss's d probs and a z-loss term on odd cases.
    Tensor dw = normal({c.N, c.K}, rng, 0.3);
    const bool extra = c.N % 2 == 1;
    Tensor dprobs = extra ? normal({c.E}, rng, 0.01) : Tensor();
    const double z_scale = extra ? 2e-3 : 0.0;
    Tensor dl({c.N, c.E}, DType::kF32);
    ref().moe_router_backward(dl, dw, p, lse, ex, c.renormalize, dprobs, z_scale);
    std::vector<float> gdl(static_cast<size_t>(c.N * c.E));
    for (int64_t n = 0; n < c.N; ++n)
      moe_router_row_backward(p.as<float>() + n * c.E, lse.as<float>()[n], ex.as<int32_t>() + n * c.K,
                              dw.as<float>() + n * c.K, extra ? dprobs.as<float>() : static_cast<const float*>(nullptr),
                              z_scale, c.renormalize, c.E, c.K, gdl.data() + n * c.E);
    expect_bits(gdl.data(), dl.as<float>(), c.N * c.E, "dlogits");
  }
}

TEST(CudaMathMoe, CombineEqualsTheRefBackend) {
  Rng rng(5);
  const int64_t N = 23, K = 3, F = 70, R = N * K;
  Tensor y = normal({R, F}, rng, 1.0), weights = normal({N, K}, rng, 0.5), dout = normal({N, F}, rng, 1.0);
  Tensor slots({N, K}, DType::kI32);
  for (int64_t i = 0; i < N * K; ++i) slots.as<int32_t>()[i] = i % 5 == 3 ? -1 : static_cast<int32_t>((i * 7) % R);
  // Each row of y named by one slot at most (the contract): i·7 mod R is a permutation of [0, R).
  Tensor out({N, F}, DType::kF32);
  ref().moe_combine_forward(out, y, weights, slots);
  std::vector<float> got(static_cast<size_t>(N * F));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f)
      got[static_cast<size_t>(n * F + f)] =
          moe_combine_element(y.as<float>(), weights.as<float>() + n * K, slots.as<int32_t>() + n * K, K, R, F, f);
  expect_bits(got.data(), out.as<float>(), N * F, "combine");

  // d weights: the warp's lane partials and butterfly (combine_backward_dw_kernel) against ref.
  Tensor dy({R, F}, DType::kF32), dweights({N, K}, DType::kF32);
  ref().moe_combine_backward(dy, dweights, dout, y, weights, slots);
  int bad = 0;
  for (int64_t s = 0; s < N * K; ++s) {
    const int32_t r = slots.as<int32_t>()[s];
    std::array<double, 32> lanes{};
    for (int lane = 0; lane < 32; ++lane)
      lanes[static_cast<size_t>(lane)] =
          r < 0 ? 0.0 : moe_dot_partial(dout.as<float>() + (s / K) * F, y.as<float>() + r * F, F, lane, 32);
    for (int o = 16; o > 0; o >>= 1) {
      const std::array<double, 32> v = lanes;
      for (int i = 0; i < 32; ++i) lanes[static_cast<size_t>(i)] = v[static_cast<size_t>(i)] + v[static_cast<size_t>(i ^ o)];
    }
    const double want = dweights.as<float>()[s];
    if (std::abs(static_cast<float>(lanes[0]) - want) > 1e-6 * (1.0 + std::abs(want)) && ++bad <= 5)
      ADD_FAILURE() << "dweights[" << s << "]: got " << lanes[0] << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace lmt::kernels::cuda_math
