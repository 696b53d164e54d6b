// The cpu backend's grouped GEMM (the MoE experts' products) under changing routings: every step
// gives each expert a different row count, and the results must match the ref backend while the
// cpu backend's primitive cache stays at one entry per weight shape (a cache keyed by row count
// grew by ~100 us of primitive creation and some memory per new count, without bound over a run).
// Correctness on fixed shapes, every dtype and the empty-expert cases is op_test's (op_cases.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

Tensor random_tensor(const Shape& s, DType dt, Rng& rng, double scale) {
  Tensor f(s, DType::kF32);
  for (int64_t i = 0; i < f.numel(); ++i) f.as<float>()[i] = static_cast<float>(scale * rng.normal());
  if (dt == DType::kF32) return f;
  Tensor t(s, dt);
  ref_backend().convert(t, f);
  return t;
}

// A routing of R rows over E experts: random row counts (some experts empty), offsets[E] == R.
std::vector<int64_t> random_offsets(int64_t E, int64_t R, Rng& rng) {
  std::vector<int64_t> cuts{0, R};
  for (int64_t e = 1; e < E; ++e) cuts.push_back(static_cast<int64_t>(rng.uniform() * static_cast<double>(R + 1)) % (R + 1));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.as<float>()[i], w = want.as<float>()[i];
    ASSERT_NEAR(g, w, tol * (1 + std::abs(w))) << what << " element " << i;
  }
}

TEST(CpuGroupedLinear, ChangingRoutingsMatchRefWithOnePrimitivePerShape) {
  auto& cpu = dynamic_cast<CpuBackend&>(cpu_backend());
  constexpr int64_t E = 6, R = 150, C = 48, OC = 80;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Rng rng(7);
    const Tensor inp = random_tensor({R, C}, dt, rng, 1.0), weight = random_tensor({E, OC, C}, dt, rng, 0.2),
                 dout = random_tensor({R, OC}, dt, rng, 1.0);
    // bf16 inputs are exact in f32, so both backends multiply the same numbers; only the order of
    // the f32 sums differs.
    const double tol = 1e-5;
    size_t primitives_after_first = 0;
    for (int step = 0; step < 12; ++step) {
      const std::vector<int64_t> offsets = random_offsets(E, R, rng);
      SCOPED_TRACE("step " + std::to_string(step));
      Tensor out_cpu({R, OC}, DType::kF32), out_ref({R, OC}, DType::kF32);
      cpu.grouped_linear_forward(out_cpu, inp, weight, offsets);
      ref_backend().grouped_linear_forward(out_ref, inp, weight, offsets);
      expect_close(out_cpu, out_ref, tol, "out");
      Tensor dinp_cpu({R, C}, DType::kF32), dinp_ref({R, C}, DType::kF32);
      Tensor dw_cpu({E, OC, C}, DType::kF32), dw_ref({E, OC, C}, DType::kF32);
      cpu.fill(dw_cpu, 0.5);  // the weight gradient accumulates
      ref_backend().fill(dw_ref, 0.5);
      cpu.grouped_linear_backward(dinp_cpu, dw_cpu, dout, inp, weight, offsets);
      ref_backend().grouped_linear_backward(dinp_ref, dw_ref, dout, inp, weight, offsets);
      expect_close(dinp_cpu, dinp_ref, tol, "dinp");
      expect_close(dw_cpu, dw_ref, tol, "dweight");
      if (step == 0) primitives_after_first = cpu.cached_gemm_primitives();
      EXPECT_EQ(cpu.cached_gemm_primitives(), primitives_after_first)
          << "a new routing created GEMM primitives (one per row count instead of one per shape)";
    }
  }
}

}  // namespace
}  // namespace lmt::kernels
