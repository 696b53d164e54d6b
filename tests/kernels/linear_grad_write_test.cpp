// Backend::linear_backward's weight gradient written over its buffer (GradWrite::kOverwrite, the
// first write after model::Transformer::zero_grads left it unzeroed) against the same gradient
// added to zeros, and the LM head's (CrossEntropyOptions::dweight_write, over several chunks of
// rows and a padded vocabulary): bit for bit, whatever the buffer held (NaN here), on the cpu backend (oneDNN
// GEMMs that write their output, in blocks of rows past 1,024 output features with AVX-512, as
// dWᵀ transposed into dW for tall, thin dW on AVX2) and the ref backend
// (the default: zeros, then the accumulating product). The bias gradient accumulates either way.
// cuda_linear_grad_write_test (ctest label gpu) is this source with LMT_GRAD_WRITE_TEST_BACKEND
// "cuda" (its GEMM written with beta = 0, the operands staged through the GPU's memory); it skips,
// with the reason, where no GPU is visible.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

struct Case {
  const char* backend;
  DType dt;
  int64_t N, C, OC;
};

#ifdef LMT_GRAD_WRITE_TEST_BACKEND
const std::vector<Case> kCases = {{LMT_GRAD_WRITE_TEST_BACKEND, DType::kBF16, 64, 48, 40},
                                  {LMT_GRAD_WRITE_TEST_BACKEND, DType::kF32, 33, 20, 17},
                                  {LMT_GRAD_WRITE_TEST_BACKEND, DType::kBF16, 32, 24, 1100},
                                  {LMT_GRAD_WRITE_TEST_BACKEND, DType::kF32, 16, 8, 4200}};
#else
const std::vector<Case> kCases = {{"cpu", DType::kBF16, 64, 48, 40},   {"cpu", DType::kF32, 33, 20, 17},
                                  {"cpu", DType::kBF16, 32, 24, 1100}, {"cpu", DType::kF32, 16, 8, 1030},
                                  {"cpu", DType::kF32, 16, 8, 4200},  // on AVX2: dWᵀ in two chunks, transposed
                                  {"ref", DType::kF32, 9, 7, 5},       {"ref", DType::kBF16, 12, 8, 6}};
#endif

// A tensor in `be`'s memory holding `host`'s values, and back.
Tensor to_backend(Backend& be, const Tensor& host) {
  Tensor t(host.view().shape(), host.dtype(), be.allocator());
  be.copy(t.view(), host.view());
  return t;
}
std::vector<float> to_host(Backend& be, const Tensor& t) {
  Tensor h(t.view().shape(), DType::kF32);
  be.copy(h.view(), t.view());
  return std::vector<float>(h.as<float>(), h.as<float>() + h.numel());
}

Tensor random_tensor(const Shape& s, DType dt, Rng& rng) {
  Tensor f(s, DType::kF32);
  for (int64_t i = 0; i < f.numel(); ++i) f.as<float>()[i] = static_cast<float>(rng.normal());
  if (dt == DType::kF32) return f;
  Tensor t(s, dt);
  ref_backend().convert(t, f);
  return t;
}

TEST(LinearGradWrite, OverwriteEqualsAccumulatingIntoZeros) {
  Rng rng(3);
  for (const Case& k : kCases) {
    SCOPED_TRACE(std::string(k.backend) + " " + std::string(dtype_name(k.dt)) + " N" + std::to_string(k.N) + " C" +
                 std::to_string(k.C) + " OC" + std::to_string(k.OC));
    auto found = find_backend(k.backend);
    if (!found.ok()) GTEST_SKIP() << found.status().ToString();
    Backend& be = **found;
    const Tensor x = to_backend(be, random_tensor({k.N, k.C}, k.dt, rng)),
                 w = to_backend(be, random_tensor({k.OC, k.C}, k.dt, rng)),
                 dy = to_backend(be, random_tensor({k.N, k.OC}, k.dt, rng));
    Tensor dw_add({k.OC, k.C}, DType::kF32, be.allocator()), dw_over({k.OC, k.C}, DType::kF32, be.allocator());
    Tensor db_add({k.OC}, DType::kF32, be.allocator()), db_over({k.OC}, DType::kF32, be.allocator());
    be.fill(dw_add.view(), 0.0);
    be.fill(dw_over.view(), std::numeric_limits<double>::quiet_NaN());
    be.fill(db_add.view(), 1.0);
    be.fill(db_over.view(), 1.0);
    be.linear_backward(TensorView(), dw_add.view(), db_add.view(), dy.view(), x.view(), w.view());
    be.linear_backward(TensorView(), dw_over.view(), db_over.view(), dy.view(), x.view(), w.view(),
                       GradWrite::kOverwrite);
    std::vector<float> add = to_host(be, dw_add), over = to_host(be, dw_over);
    for (size_t i = 0; i < add.size(); ++i) ASSERT_EQ(over[i], add[i]) << "dweight element " << i;
    const std::vector<float> badd = to_host(be, db_add), bover = to_host(be, db_over);
    for (size_t i = 0; i < badd.size(); ++i)
      ASSERT_EQ(bover[i], badd[i]) << "dbias element " << i << " (accumulates onto 1)";
    // A second overwrite replaces the first; accumulating doubles it.
    be.linear_backward(TensorView(), dw_over.view(), TensorView(), dy.view(), x.view(), w.view(),
                       GradWrite::kOverwrite);
    be.linear_backward(TensorView(), dw_add.view(), TensorView(), dy.view(), x.view(), w.view());
    add = to_host(be, dw_add), over = to_host(be, dw_over);
    for (size_t i = 0; i < add.size(); ++i)
      ASSERT_EQ(2.0f * over[i], add[i]) << "dweight element " << i << " after two writes";
  }
}

struct HeadCase {
  const char* backend;
  DType dt;
  int64_t N, C, V, Vp, chunk_rows;
};

// The cuda backend's chunks are at least 4,096 rows: N = 5,000 makes two.
#ifdef LMT_GRAD_WRITE_TEST_BACKEND
const std::vector<HeadCase> kHeadCases = {{LMT_GRAD_WRITE_TEST_BACKEND, DType::kBF16, 5000, 32, 50, 64, 256},
                                          {LMT_GRAD_WRITE_TEST_BACKEND, DType::kF32, 300, 16, 70, 70, 256}};
#else
const std::vector<HeadCase> kHeadCases = {{"cpu", DType::kBF16, 40, 32, 50, 64, 8},
                                          {"cpu", DType::kF32, 37, 16, 70, 70, 16},
                                          {"ref", DType::kF32, 20, 8, 30, 32, 8}};
#endif

// The padding rows [V, Vp) hold zeros (the model's) and must still hold zeros: untouched, or written
// with their zero gradient.
TEST(LmHeadGradWrite, OverwriteEqualsAccumulatingIntoZeros) {
  Rng rng(5);
  for (const HeadCase& k : kHeadCases) {
    SCOPED_TRACE(std::string(k.backend) + " " + std::string(dtype_name(k.dt)) + " N" + std::to_string(k.N) + " V" +
                 std::to_string(k.V) + " Vp" + std::to_string(k.Vp));
    auto found = find_backend(k.backend);
    if (!found.ok()) GTEST_SKIP() << found.status().ToString();
    Backend& be = **found;
    Tensor w_host = random_tensor({k.Vp, k.C}, k.dt, rng);
    const Tensor x = to_backend(be, random_tensor({k.N, k.C}, k.dt, rng));
    Tensor targets_host({k.N}, DType::kI32);
    for (int64_t i = 0; i < k.N; ++i)
      targets_host.as<int32_t>()[i] = i % 7 == 3 ? -100 : static_cast<int32_t>(rng.below(static_cast<uint64_t>(k.V)));
    const Tensor w = to_backend(be, w_host), targets = to_backend(be, targets_host);
    Tensor losses({k.N}, DType::kF32, be.allocator());
    Tensor dw_add({k.Vp, k.C}, DType::kF32, be.allocator()), dw_over({k.Vp, k.C}, DType::kF32, be.allocator());
    be.fill(dw_add.view(), 0.0);
    be.fill(dw_over.view(), 0.0);
    be.fill(dw_over.view().slice_rows(0, k.V), std::numeric_limits<double>::quiet_NaN());
    CrossEntropyOptions o;
    o.vocab_size = k.V;
    o.chunk_rows = k.chunk_rows;
    o.grad_scale = 1.0f / static_cast<float>(k.N);
    be.lm_head_cross_entropy(losses.view(), x.view(), w.view(), targets.view(), o, TensorView(), dw_add.view());
    o.dweight_write = GradWrite::kOverwrite;
    be.lm_head_cross_entropy(losses.view(), x.view(), w.view(), targets.view(), o, TensorView(), dw_over.view());
    const std::vector<float> add = to_host(be, dw_add), over = to_host(be, dw_over);
    for (size_t i = 0; i < add.size(); ++i) ASSERT_EQ(over[i], add[i]) << "dweight element " << i;
    for (size_t i = static_cast<size_t>(k.V * k.C); i < over.size(); ++i)
      ASSERT_EQ(over[i], 0.0f) << "padding row element " << i;
  }
}

}  // namespace
}  // namespace lmt::kernels
