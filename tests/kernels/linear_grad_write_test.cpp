// Backend::linear_backward's weight gradient written over its buffer (GradWrite::kOverwrite, the
// first write after model::Transformer::zero_grads left it unzeroed) against the same gradient
// added to zeros: bit for bit, whatever the buffer held (NaN here), on the cpu backend (oneDNN
// GEMMs that write their output, in blocks of rows past 1,024 output features with AVX-512, as
// dWᵀ transposed into dW for tall, thin dW on AVX2) and the ref backend
// (the default: zeros, then the accumulating product). The bias gradient accumulates either way.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

Tensor random_tensor(const Shape& s, DType dt, Rng& rng) {
  Tensor f(s, DType::kF32);
  for (int64_t i = 0; i < f.numel(); ++i) f.as<float>()[i] = static_cast<float>(rng.normal());
  if (dt == DType::kF32) return f;
  Tensor t(s, dt);
  ref_backend().convert(t, f);
  return t;
}

TEST(LinearGradWrite, OverwriteEqualsAccumulatingIntoZeros) {
  struct Case {
    const char* backend;
    DType dt;
    int64_t N, C, OC;
  };
  const Case cases[] = {{"cpu", DType::kBF16, 64, 48, 40},  {"cpu", DType::kF32, 33, 20, 17},
                        {"cpu", DType::kBF16, 32, 24, 1100}, {"cpu", DType::kF32, 16, 8, 1030},
                        {"cpu", DType::kF32, 16, 8, 4200},  // on AVX2: dWᵀ in two chunks, transposed
                        {"ref", DType::kF32, 9, 7, 5},       {"ref", DType::kBF16, 12, 8, 6}};
  Rng rng(3);
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.backend) + " " + std::string(dtype_name(k.dt)) + " N" + std::to_string(k.N) + " C" +
                 std::to_string(k.C) + " OC" + std::to_string(k.OC));
    Backend& be = backend(k.backend);
    const Tensor x = random_tensor({k.N, k.C}, k.dt, rng), w = random_tensor({k.OC, k.C}, k.dt, rng),
                 dy = random_tensor({k.N, k.OC}, k.dt, rng);
    Tensor dw_add({k.OC, k.C}, DType::kF32), dw_over({k.OC, k.C}, DType::kF32);
    Tensor db_add({k.OC}, DType::kF32), db_over({k.OC}, DType::kF32);
    be.fill(dw_add.view(), 0.0);
    be.fill(dw_over.view(), std::numeric_limits<double>::quiet_NaN());
    be.fill(db_add.view(), 1.0);
    be.fill(db_over.view(), 1.0);
    be.linear_backward(TensorView(), dw_add.view(), db_add.view(), dy.view(), x.view(), w.view());
    be.linear_backward(TensorView(), dw_over.view(), db_over.view(), dy.view(), x.view(), w.view(),
                       GradWrite::kOverwrite);
    for (int64_t i = 0; i < dw_add.numel(); ++i)
      ASSERT_EQ(dw_over.as<float>()[i], dw_add.as<float>()[i]) << "dweight element " << i;
    for (int64_t i = 0; i < db_add.numel(); ++i)
      ASSERT_EQ(db_over.as<float>()[i], db_add.as<float>()[i]) << "dbias element " << i << " (accumulates onto 1)";
    // A second overwrite replaces the first; accumulating doubles it.
    be.linear_backward(TensorView(), dw_over.view(), TensorView(), dy.view(), x.view(), w.view(), GradWrite::kOverwrite);
    be.linear_backward(TensorView(), dw_add.view(), TensorView(), dy.view(), x.view(), w.view());
    for (int64_t i = 0; i < dw_add.numel(); ++i)
      ASSERT_EQ(2.0f * dw_over.as<float>()[i], dw_add.as<float>()[i]) << "dweight element " << i << " after two writes";
  }
}

}  // namespace
}  // namespace lmt::kernels
