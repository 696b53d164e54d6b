// Finite-difference check of every ref backward in f64: for each case with a backward, the
// analytic gradient of the case's objective (default Σ_o <output_o, cotangent_o>) w.r.t. each
// differentiable input equals a central difference at up to 24 sampled elements.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "op_cases.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"

namespace lmt::testing {
namespace {

double objective(const OpCase& c, const Env& e) {
  if (c.objective) return c.objective(e);
  double s = 0;
  for (const auto& name : c.outputs) {
    const TensorView out = e[name], dout = e["d" + name];
    for (int64_t i = 0; i < out.numel(); ++i) s += out.as<double>()[i] * dout.as<double>()[i];
  }
  return s;
}

class RefGradCheck : public ::testing::TestWithParam<OpCase> {};

TEST_P(RefGradCheck, BackwardMatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  Env env = make_env(c, DType::kF64, 2);
  kernels::Backend& ref = kernels::backend("ref");
  c.forward(ref, env);
  // Parameter gradients accumulate into possibly non-zero buffers: the gradient is the increment.
  std::map<std::string, std::vector<double>> before;
  for (const auto& [input, grad] : c.grads) {
    const TensorView g = env[grad];
    before[grad].assign(g.as<double>(), g.as<double>() + g.numel());
  }
  c.backward(ref, env);

  const double h = 1e-6;
  Rng pick(3);
  for (const auto& [input, grad] : c.grads) {
    const TensorView x = env[input], g = env[grad];
    const int64_t n = x.numel();
    const int64_t samples = std::min<int64_t>(n, 24);
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t i = n <= 24 ? s : static_cast<int64_t>(pick.below(n));
      double& xi = x.as<double>()[i];
      const double saved = xi;
      xi = saved + h;
      c.forward(ref, env);
      const double plus = objective(c, env);
      xi = saved - h;
      c.forward(ref, env);
      const double minus = objective(c, env);
      xi = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = g.as<double>()[i] - before[grad][i];
      EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << "d objective / d " << input << "[" << i << "]";
    }
  }
}

std::vector<OpCase> gradcheck_cases() {
  std::vector<OpCase> out;
  for (OpCase& c : all_op_cases())
    if (c.backward && c.gradcheck && !c.grads.empty()) out.push_back(c);
  return out;
}

std::string test_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string s = info.param.name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllOps, RefGradCheck, ::testing::ValuesIn(gradcheck_cases()), test_name);

}  // namespace
}  // namespace lmt::testing
