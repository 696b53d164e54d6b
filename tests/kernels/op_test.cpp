// The universal op test: every case of op_cases.cpp runs on every registered backend but ref
// (kernels/registry.h: "cpu" today, "cuda" once its target registers itself) and on ref from
// identical inputs, and every output, saved statistic and gradient must agree within atol + rtol·|ref|.
// bf16 tensors (conversions, weight mirrors) must agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_cases.h"
#include "op_compare.h"
#include "lmt/base/bf16.h"
#include "lmt/kernels/registry.h"

namespace lmt::testing {
namespace {

// Tolerances for f32 results; a case may scale them (bf16 rounding inside an op).
constexpr double kAtol = 1e-4, kRtol = 1e-4;

void expect_close(const std::string& what, const TensorView& fast, const TensorView& ref, double scale) {
  lmt::testing::expect_close(what, fast, ref, scale, kAtol, kRtol);
}

// Every registered backend except the oracle itself.
std::vector<std::string> fast_backends() {
  std::vector<std::string> out;
  for (const auto& name : kernels::backend_names())
    if (name != "ref") out.push_back(name);
  return out;
}

struct BackendCase {
  std::string backend;  // a registry name
  OpCase op;
};

void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.backend << " " << c.op.name; }

std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  const std::vector<OpCase> ops = all_op_cases();
  for (const auto& b : fast_backends())
    for (const auto& op : ops) out.push_back({b, op});
  return out;
}

class BackendVsRef : public ::testing::TestWithParam<BackendCase> {};

TEST_P(BackendVsRef, OutputsAndGradientsMatchReference) {
  const OpCase& c = GetParam().op;
  kernels::Backend& fast = kernels::backend(GetParam().backend);
  kernels::Backend& oracle = kernels::backend("ref");
  Env ref = make_env(c, DType::kF32, 1), out = make_env(c, DType::kF32, 1);
  c.forward(oracle, ref);
  c.forward(fast, out);
  for (const auto& name : c.outputs) expect_close(name, out[name], ref[name], c.tolerance_scale);
  for (const auto& name : c.aux) expect_close(name, out[name], ref[name], c.tolerance_scale);
  if (!c.backward) return;
  c.backward(oracle, ref);
  c.backward(fast, out);
  for (const auto& [input, grad] : c.grads) expect_close(grad, out[grad], ref[grad], c.tolerance_scale);
}

// "cpu_matmul_bf16": the backend, then the case.
std::string test_name(const ::testing::TestParamInfo<BackendCase>& info) {
  std::string s = info.param.backend + "_" + info.param.op.name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllOps, BackendVsRef, ::testing::ValuesIn(backend_cases()), test_name);

// The walk above must not be empty: the cpu backend is always registered.
TEST(BackendVsRefCoverage, EveryRegisteredBackendButRefIsCompared) {
  const std::vector<std::string> fast = fast_backends();
  EXPECT_NE(std::find(fast.begin(), fast.end(), "cpu"), fast.end());
  EXPECT_EQ(backend_cases().size(), fast.size() * all_op_cases().size());
}

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
  kernels::backend("cpu").convert(cpu16, x);
  kernels::backend("ref").convert(ref16, x);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(cpu16.as<bf16>()[i].bits, ref16.as<bf16>()[i].bits) << "value " << vals[i];
}

}  // namespace
}  // namespace lmt::testing
