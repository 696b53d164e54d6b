// The residual add fused with the norm after it (kernels/backend.h add_layernorm_forward,
// add_rmsnorm_forward) against the two ops it replaces on the same backend: sum = add(a, b), then
// the norm of sum. Every output (sum, out in f32 and bf16, mean, rstd) must be the same bits; the
// model relies on it (model/block.h leaves each sub-block's add to the next norm, and a run must not
// change when it does). The values themselves are checked against ref by op_test.
//
// This binary tests the cpu backend; cuda_fused_norm_test (ctest label gpu) is this source with
// LMT_FUSED_NORM_TEST_BACKEND "cuda" and skips, with the reason, where no GPU is visible. Widths
// reach the cuda float4 rows (768, 2048, 4096), its scalar rows past the register cache (2051) and
// its general path (4100); sum written over a or b in place; a and b off the 16-byte grid (the cuda
// backend then runs add() and the norm: still the same bits).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "backend_under_test.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

#ifndef LMT_FUSED_NORM_TEST_BACKEND
#define LMT_FUSED_NORM_TEST_BACKEND "cpu"
#endif

namespace lmt {
namespace {

constexpr std::string_view kBackend = LMT_FUSED_NORM_TEST_BACKEND;

kernels::Backend* backend_under_test() { return testing::backend_or_null(kBackend); }
#define SKIP_WITHOUT_BACKEND() LMT_SKIP_WITHOUT_BACKEND(kBackend)

std::vector<char> bytes_of(kernels::Backend& be, const TensorView& t) {
  std::vector<char> host(static_cast<size_t>(t.bytes()));
  be.copy(TensorView(host.data(), t.shape(), t.dtype()), t);
  return host;
}

// A tensor of the backend's of `n` random floats (scale 2); views of it at an offset of 1 element
// are off the 16-byte grid.
Tensor random_buffer(kernels::Backend& be, int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = 2.0f * rng.normal();
  Tensor t({n}, DType::kF32, be.allocator());
  be.copy(t, TensorView(v.data(), Shape{n}, DType::kF32));
  return t;
}

TensorView rows(const Tensor& buffer, int64_t offset, int64_t N, int64_t C) {
  return TensorView(buffer.as<float>() + offset, Shape{N, C}, DType::kF32, buffer.device());
}

enum class Alias { kNone, kSumIsA, kSumIsB };

struct Case {
  int64_t C;
  bool layernorm;
  DType out;
  Alias alias;
  int64_t a_offset;  // elements: 1 puts a's rows off the 16-byte grid
  std::string name() const {
    return std::string(layernorm ? "add_layernorm" : "add_rmsnorm") + " C=" + std::to_string(C) + " out " +
           std::string(dtype_name(out)) +
           (alias == Alias::kSumIsA   ? " sum=a"
            : alias == Alias::kSumIsB ? " sum=b"
                                      : "") +
           (a_offset != 0 ? " a unaligned" : "");
  }
};

// Runs the fused op and add() + the norm from the same inputs; every output must be the same bits.
void expect_fused_equals_unfused(kernels::Backend& be, const Case& k) {
  const int64_t N = 5, C = k.C, n = N * C;
  Allocator& al = be.allocator();
  Tensor w = random_buffer(be, C, 41 + C), bias = random_buffer(be, C, 42 + C);
  // Two copies of the inputs: the fused op may write sum over one of them.
  struct Run {
    Tensor a, b, sum, out, mean, rstd;
  };
  auto make = [&]() {
    Run r{random_buffer(be, n + 1, 43 + C), random_buffer(be, n, 44 + C), Tensor({N, C}, DType::kF32, al),
          Tensor({N, C}, k.out, al),        Tensor({N}, DType::kF32, al), Tensor({N}, DType::kF32, al)};
    return r;
  };
  Run fused = make(), plain = make();
  auto views = [&](Run& r) {
    const TensorView a = rows(r.a, k.a_offset, N, C), b = rows(r.b, 0, N, C);
    const TensorView sum = k.alias == Alias::kSumIsA ? a : k.alias == Alias::kSumIsB ? b : r.sum.view();
    return std::tuple{a, b, sum};
  };
  {
    auto [a, b, sum] = views(fused);
    if (k.layernorm)
      be.add_layernorm_forward(sum, fused.out, fused.mean, fused.rstd, a, b, w, bias, 1e-5f);
    else
      be.add_rmsnorm_forward(sum, fused.out, fused.rstd, a, b, w, 1e-6f);
    const std::vector<char> got = bytes_of(be, sum);
    auto [pa, pb, psum] = views(plain);
    be.add(psum, pa, pb);
    if (k.layernorm)
      be.layernorm_forward(plain.out, plain.mean, plain.rstd, psum, w, bias, 1e-5f);
    else
      be.rmsnorm_forward(plain.out, plain.rstd, psum, w, 1e-6f);
    EXPECT_EQ(got, bytes_of(be, psum)) << k.name() << ": sum";
  }
  EXPECT_EQ(bytes_of(be, fused.out), bytes_of(be, plain.out)) << k.name() << ": out";
  EXPECT_EQ(bytes_of(be, fused.rstd), bytes_of(be, plain.rstd)) << k.name() << ": rstd";
  if (k.layernorm) {
    EXPECT_EQ(bytes_of(be, fused.mean), bytes_of(be, plain.mean)) << k.name() << ": mean";
  }
}

constexpr int64_t kWidths[] = {1, 7, 768, 2048, 2051, 4096, 4100};

TEST(FusedNorm, EqualsAddThenNormBitForBit) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  for (int64_t C : kWidths) {
    for (bool layernorm : {true, false}) {
      for (DType out : {DType::kF32, DType::kBF16})
        expect_fused_equals_unfused(be, {C, layernorm, out, Alias::kNone, 0});
    }
  }
}

TEST(FusedNorm, SumMayOverwriteAnInput) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  for (int64_t C : {int64_t{7}, int64_t{768}, int64_t{2051}}) {
    for (Alias alias : {Alias::kSumIsA, Alias::kSumIsB}) {
      for (bool layernorm : {true, false}) expect_fused_equals_unfused(be, {C, layernorm, DType::kBF16, alias, 0});
    }
  }
}

TEST(FusedNorm, InputsOffTheVectorGrid) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  for (int64_t C : {int64_t{768}, int64_t{2048}}) {
    for (bool layernorm : {true, false}) expect_fused_equals_unfused(be, {C, layernorm, DType::kF32, Alias::kNone, 1});
  }
}

}  // namespace
}  // namespace lmt
