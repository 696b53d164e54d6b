// The universal op test on the GPU (ctest label "gpu"): every case of op_cases.cpp runs on the cuda
// backend and on ref from identical inputs. The inputs are made on the host, copied to the GPU with
// Backend::copy, and the results copied back; every output, saved statistic and gradient must agree
// within atol + rtol·|ref| (bf16 results bit for bit), as for the cpu backend in op_test.cpp.
// Skips, with the reason, where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "op_cases.h"
#include "op_compare.h"
#include "lmt/base/bf16.h"
#include "lmt/kernels/registry.h"

namespace lmt::testing {
namespace {

// The cpu backend's tolerances (op_test.cpp), twice as wide: GPU reductions sum in another order.
constexpr double kAtol = 2e-4, kRtol = 2e-4;

void expect_close(const std::string& what, const TensorView& fast, const TensorView& ref, double scale) {
  lmt::testing::expect_close(what, fast, ref, scale, kAtol, kRtol);
}

// Device copies of every tensor of `host` (same names), made with the backend's allocator.
Env to_device(Env& host, kernels::Backend& be) {
  Env d;
  for (auto& [name, t] : host.tensors()) {
    Tensor x(t.shape(), t.dtype(), be.allocator());
    be.copy(x, t);
    d.tensors().emplace(name, std::move(x));
  }
  return d;
}

void to_host(Env& device, Env& host, kernels::Backend& be) {
  for (auto& [name, t] : device.tensors()) be.copy(host.tensors().at(name), t);
}

kernels::Backend* cuda_or_skip() {
  StatusOr<kernels::Backend*> be = kernels::find_backend("cuda");
  if (!be.ok()) return nullptr;
  return *be;
}

class CudaVsRef : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaVsRef, OutputsAndGradientsMatchReference) {
  const OpCase& c = GetParam();
  kernels::Backend* cuda = cuda_or_skip();
  if (cuda == nullptr) GTEST_SKIP() << kernels::find_backend("cuda").status().ToString();
  kernels::Backend& oracle = kernels::backend("ref");
  Env ref = make_env(c, DType::kF32, 1), out = make_env(c, DType::kF32, 1);
  Env dev = to_device(out, *cuda);
  c.forward(oracle, ref);
  c.forward(*cuda, dev);
  to_host(dev, out, *cuda);
  for (const auto& name : c.outputs) expect_close(name, out[name], ref[name], c.tolerance_scale);
  for (const auto& name : c.aux) expect_close(name, out[name], ref[name], c.tolerance_scale);
  if (!c.backward) return;
  c.backward(oracle, ref);
  c.backward(*cuda, dev);
  to_host(dev, out, *cuda);
  for (const auto& [input, grad] : c.grads) expect_close(grad, out[grad], ref[grad], c.tolerance_scale);
}

std::string test_name(const ::testing::TestParamInfo<OpCase>& info) {
  std::string s = info.param.name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaVsRef, ::testing::ValuesIn(all_op_cases()), test_name);

// The backend is registered in every build that has it, GPU or not; without a GPU it says why.
TEST(CudaBackend, RegisteredAndSaysWhetherAGpuIsVisible) {
  const auto names = kernels::backend_names();
  ASSERT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
  const Status s = kernels::backend("cuda").available();
  if (!s.ok()) {
    EXPECT_NE(s.message().find("no CUDA device"), std::string::npos) << s.ToString();
    EXPECT_FALSE(s.hint().empty());
  }
}

}  // namespace
}  // namespace lmt::testing
