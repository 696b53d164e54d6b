// The bf16 outputs of the activation and norm ops (kernels/backend.h): activation_forward,
// activation_backward, glu_forward, glu_backward, and the forward norms (plain and fused with the
// residual add) may write bf16 for an f32 input, and the bits must equal convert() of the same
// backend's f32 output, element for element (bf16 runs feed them to GEMMs in place of that
// conversion, model/ffn_block.cpp, model/attention_block.cpp). The f32 outputs themselves are
// checked against ref by op_test.
//
// This binary tests the cpu backend; cuda_bf16_outputs_test (ctest label gpu) is this source with
// LMT_BF16_OUTPUTS_TEST_BACKEND "cuda" and skips, with the reason, where no GPU is visible. Shapes
// reach the vector paths (lengths and widths divisible by 4), the scalar tails and paths (odd
// lengths), and on the cpu more than one staging block per row (H > 4096). Outputs are poisoned
// first, so an element left unwritten shows as a mismatch.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend_under_test.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

#ifndef LMT_BF16_OUTPUTS_TEST_BACKEND
#define LMT_BF16_OUTPUTS_TEST_BACKEND "cpu"
#endif

namespace lmt {
namespace {

using kernels::Activation;

constexpr std::string_view kBackend = LMT_BF16_OUTPUTS_TEST_BACKEND;

kernels::Backend* backend_under_test() { return testing::backend_or_null(kBackend); }
#define SKIP_WITHOUT_BACKEND() LMT_SKIP_WITHOUT_BACKEND(kBackend)

Tensor upload(kernels::Backend& be, std::vector<float> values, Shape shape) {
  Tensor t(shape, DType::kF32, be.allocator());
  be.copy(t, TensorView(values.data(), shape, DType::kF32));
  return t;
}

Tensor random_f32(kernels::Backend& be, Shape shape, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = scale * rng.normal();
  return upload(be, std::move(v), shape);
}

// A bf16 tensor whose every element holds a NaN pattern until written.
Tensor poisoned_bf16(kernels::Backend& be, Shape shape) {
  Tensor t(shape, DType::kBF16, be.allocator());
  std::vector<uint16_t> nan(static_cast<size_t>(shape.numel()), 0x7fc1);
  be.copy(t, TensorView(nan.data(), shape, DType::kBF16));
  return t;
}

std::vector<uint16_t> bits(kernels::Backend& be, const Tensor& t) {
  std::vector<uint16_t> host(static_cast<size_t>(t.numel()));
  be.copy(TensorView(host.data(), t.shape(), DType::kBF16), t);
  return host;
}

// The bf16 written directly must be convert() of the f32 written by the same op.
void expect_fused_equals_convert(kernels::Backend& be, const Tensor& f32, const Tensor& fused, const std::string& what) {
  Tensor converted = poisoned_bf16(be, f32.shape());
  be.convert(converted, f32);
  const std::vector<uint16_t> want = bits(be, converted), got = bits(be, fused);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << what << ": element " << i << " of " << got.size() << " differs from convert()";
}

// op(out) into an f32 and into a poisoned bf16 output of `shape`: the bf16 must be convert() of the f32.
template <typename Op>
void expect_bf16_output_rounds_like_convert(kernels::Backend& be, Shape shape, Op op, const std::string& what) {
  Tensor f32(shape, DType::kF32, be.allocator()), b16 = poisoned_bf16(be, shape);
  op(f32.view());
  op(b16.view());
  expect_fused_equals_convert(be, f32, b16, what);
}

constexpr Activation kActs[] = {Activation::kGeluTanh, Activation::kSilu, Activation::kRelu};

std::string act_name(Activation a) {
  return a == Activation::kGeluTanh ? "gelu" : a == Activation::kSilu ? "silu" : "relu";
}

TEST(Bf16Outputs, PointwiseActivationsRoundLikeConvert) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1000}, int64_t{4099}, int64_t{20000}})
    for (Activation act : kActs) {
      const std::string what = act_name(act) + " n=" + std::to_string(n);
      const Shape s{n};
      Tensor x = random_f32(be, s, 11 + n, 2.0f), dy = random_f32(be, s, 12 + n, 1.0f);
      expect_bf16_output_rounds_like_convert(
          be, s, [&](const TensorView& y) { be.activation_forward(act, y, x); }, "activation_forward " + what);
      expect_bf16_output_rounds_like_convert(
          be, s, [&](const TensorView& dx) { be.activation_backward(act, dx, dy, x); }, "activation_backward " + what);
    }
}

TEST(Bf16Outputs, GatedLinearUnitsRoundLikeConvert) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  struct NH { int64_t N, H; };
  for (NH d : {NH{1, 1}, NH{5, 37}, NH{3, 1000}, NH{2, 4100}, NH{2, 8195}})
    for (Activation act : kActs) {
      const std::string what = act_name(act) + " N=" + std::to_string(d.N) + " H=" + std::to_string(d.H);
      const Shape su{d.N, 2 * d.H}, sa{d.N, d.H};
      Tensor u = random_f32(be, su, 21 + d.H, 2.0f), da = random_f32(be, sa, 22 + d.H, 1.0f);
      expect_bf16_output_rounds_like_convert(
          be, sa, [&](const TensorView& a) { be.glu_forward(act, a, u); }, "glu_forward " + what);
      expect_bf16_output_rounds_like_convert(
          be, su, [&](const TensorView& du) { be.glu_backward(act, du, da, u); }, "glu_backward " + what);
    }
}

// C: the cuda scalar rows (1, 7, 2051: past its 32-column register cache), float4 rows (768, 2048,
// 4096) and its general path (4100); on the cpu more than one staging segment (2051 and up).
constexpr int64_t kNormWidths[] = {1, 7, 768, 2048, 2051, 4096, 4100};

TEST(Bf16Outputs, NormsRoundLikeConvert) {
  SKIP_WITHOUT_BACKEND();
  kernels::Backend& be = *backend_under_test();
  for (int64_t C : kNormWidths) {
    const int64_t N = 6;
    const std::string what = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    Tensor x = random_f32(be, {N, C}, 31 + C, 2.0f), w = random_f32(be, {C}, 32 + C, 1.0f);
    Tensor b = random_f32(be, {C}, 33 + C, 1.0f), d = random_f32(be, {N, C}, 34 + C, 1.0f);
    Tensor mean({N}, DType::kF32, be.allocator()), rstd({N}, DType::kF32, be.allocator());
    Tensor sum({N, C}, DType::kF32, be.allocator());
    expect_bf16_output_rounds_like_convert(
        be, {N, C}, [&](const TensorView& y) { be.layernorm_forward(y, mean, rstd, x, w, b, 1e-5f); },
        "layernorm_forward" + what);
    expect_bf16_output_rounds_like_convert(
        be, {N, C}, [&](const TensorView& y) { be.rmsnorm_forward(y, rstd, x, w, 1e-6f); }, "rmsnorm_forward" + what);
    expect_bf16_output_rounds_like_convert(
        be, {N, C}, [&](const TensorView& y) { be.add_layernorm_forward(sum, y, mean, rstd, x, d, w, b, 1e-5f); },
        "add_layernorm_forward" + what);
    expect_bf16_output_rounds_like_convert(
        be, {N, C}, [&](const TensorView& y) { be.add_rmsnorm_forward(sum, y, rstd, x, d, w, 1e-6f); },
        "add_rmsnorm_forward" + what);
  }
}

}  // namespace
}  // namespace lmt
