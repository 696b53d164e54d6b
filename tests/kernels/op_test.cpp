// The universal op test: every case of op_cases.cpp runs on the cpu and ref backends from identical
// inputs, and every output, saved statistic and gradient must agree within atol + rtol·|ref|.
// bf16 tensors (conversions, weight mirrors) must agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_cases.h"
#include "lmt/base/bf16.h"

namespace lmt::testing {
namespace {

double value_at(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.as<float>()[i];
    case DType::kF64: return t.as<double>()[i];
    case DType::kBF16: return static_cast<float>(t.as<bf16>()[i]);
    default: return t.as<int32_t>()[i];
  }
}

// Tolerances for f32 results; a case may scale them (bf16 rounding inside an op).
constexpr double kAtol = 1e-4, kRtol = 1e-4;

void expect_close(const std::string& what, const TensorView& cpu, const TensorView& ref, double scale) {
  ASSERT_EQ(cpu.numel(), ref.numel()) << what;
  if (cpu.dtype() == DType::kBF16) {
    for (int64_t i = 0; i < cpu.numel(); ++i)
      ASSERT_EQ(cpu.as<bf16>()[i].bits, ref.as<bf16>()[i].bits)
          << what << "[" << i << "] bf16 differs: cpu " << value_at(cpu, i) << " ref " << value_at(ref, i);
    return;
  }
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double c = value_at(cpu, i), r = value_at(ref, i);
    ASSERT_TRUE(std::isfinite(c)) << what << "[" << i << "] is " << c << " (ref " << r << ")";
    const double ratio = std::abs(c - r) / (scale * (kAtol + kRtol * std::abs(r)));
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  EXPECT_LE(worst, 1.0) << what << "[" << worst_i << "]: cpu " << value_at(cpu, worst_i) << " ref "
                        << value_at(ref, worst_i) << " (error " << worst << "× the tolerance)";
}

class CpuVsRef : public ::testing::TestWithParam<OpCase> {};

TEST_P(CpuVsRef, OutputsAndGradientsMatchReference) {
  const OpCase& c = GetParam();
  Env ref = make_env(c, DType::kF32, 1), cpu = make_env(c, DType::kF32, 1);
  c.forward(kernels::ref_backend(), ref);
  c.forward(kernels::cpu_backend(), cpu);
  for (const auto& name : c.outputs) expect_close(name, cpu[name], ref[name], c.tolerance_scale);
  for (const auto& name : c.aux) expect_close(name, cpu[name], ref[name], c.tolerance_scale);
  if (!c.backward) return;
  c.backward(kernels::ref_backend(), ref);
  c.backward(kernels::cpu_backend(), cpu);
  for (const auto& [input, grad] : c.grads) expect_close(grad, cpu[grad], ref[grad], c.tolerance_scale);
}

std::string test_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string s = info.param.name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CpuVsRef, ::testing::ValuesIn(all_op_cases()), test_name);

// Special values go through the vectorised conversion exactly as through base/bf16.h.
TEST(CpuConvert, SpecialValuesRoundLikeReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> vals = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, -nan, 3.4028235e38f, 1e-45f,
                             1.00390625f /* tie: 1 + 2^-8 → even (1.0) */, 1.01171875f /* tie → up */,
                             65504.0f, -2.5e-39f};
  for (int i = 0; i < 40; ++i) vals.push_back(static_cast<float>(i) * 0.3337f - 5.0f);  // span vector+tail
  const int64_t n = static_cast<int64_t>(vals.size());
  Tensor x({n}, DType::kF32), cpu16({n}, DType::kBF16), ref16({n}, DType::kBF16);
  std::copy(vals.begin(), vals.end(), x.as<float>());
  kernels::cpu_backend().convert(cpu16, x);
  kernels::ref_backend().convert(ref16, x);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(cpu16.as<bf16>()[i].bits, ref16.as<bf16>()[i].bits) << "value " << vals[i];
}

}  // namespace
}  // namespace lmt::testing
