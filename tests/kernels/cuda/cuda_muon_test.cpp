// Muon's Newton–Schulz on the GPU (ctest label "gpu"): Backend::matmul_batched_symmetric (the cuda
// backend's default, the whole product) and MuonUpdater in both methods on cuda, against the cpu
// backend from identical inputs (GPT-2-sized 768 x 2304 and a tall 768 x 256, where the Gram form
// runs). f32: within 1e-4 relative (Frobenius; cuBLAS runs f32 as f32, never TF32); bf16: each
// side rounds its GEMM operands to bf16, so within the bf16 iteration's own distance from f32
// (tests/optim/muon_test.cpp: 2–3%). Skips, with the reason, where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/optim/muon.h"
#include "lmt/tensor/tensor.h"

namespace lmt {
namespace {

using gpu_test::cuda;
using gpu_test::relative_distance;

std::vector<float> randn(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// `host` copied into a tensor of `be` (the GPU's memory for cuda), and back.
Tensor on(kernels::Backend& be, std::vector<float>& host, Shape shape) {
  Tensor t(shape, DType::kF32, be.allocator());
  be.copy(t, TensorView(host.data(), shape, DType::kF32));
  return t;
}
std::vector<float> back(kernels::Backend& be, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  be.copy(TensorView(host.data(), t.shape(), DType::kF32), t);
  return host;
}

TEST(CudaMuon, SymmetricProductsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  kernels::Backend& gpu = *cuda();
  kernels::Backend& cpu = kernels::cpu_backend();
  const int64_t nb = 2, M = 768, K = 2304;
  std::vector<float> x = randn(nb * M * K, 1);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<float> results[2];
    kernels::Backend* backends[2] = {&gpu, &cpu};
    for (int i = 0; i < 2; ++i) {
      kernels::Backend& be = *backends[i];
      Tensor x32 = on(be, x, Shape{nb, M, K});
      Tensor a(Shape{nb, M, K}, dt, be.allocator());
      be.convert(a, x32);
      Tensor c(Shape{nb, M, M}, DType::kF32, be.allocator());
      be.matmul_batched_symmetric(c, a, a, /*trans_a=*/false, /*trans_b=*/true);
      results[i] = back(be, c);
    }
    EXPECT_LT(relative_distance(results[0], results[1]), 1e-5);
  }
}

TEST(CudaMuon, NewtonSchulzOnTheGpuMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  kernels::Backend& gpu = *cuda();
  kernels::Backend& cpu = kernels::cpu_backend();
  struct Case {
    int64_t rows, cols;
  };
  for (const Case c : {Case{768, 2304}, Case{768, 256}}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (optim::NsMethod method : {optim::NsMethod::kGram, optim::NsMethod::kStandard}) {
        SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " " + std::string(dtype_name(dt)) +
                     (method == optim::NsMethod::kGram ? " gram" : " standard"));
        const int64_t side = std::min(c.rows, c.cols);
        std::vector<float> g = randn(c.rows * c.cols, 2);
        std::vector<float> results[2];
        kernels::Backend* backends[2] = {&gpu, &cpu};
        for (int i = 0; i < 2; ++i) {
          kernels::Backend& be = *backends[i];
          const optim::NsPrecision p = dt == DType::kF32 ? optim::NsPrecision::kF32 : optim::NsPrecision::kBF16;
          optim::MuonUpdater muon({c.rows * c.cols, side * side}, p, method, be.allocator());
          Tensor x = on(be, g, Shape{c.rows, c.cols});
          muon.orthogonalise(be, x, 5);
          results[i] = back(be, x);
        }
        EXPECT_LT(relative_distance(results[0], results[1]), dt == DType::kF32 ? 1e-4 : 5e-2);
      }
    }
  }
}

}  // namespace
}  // namespace lmt
