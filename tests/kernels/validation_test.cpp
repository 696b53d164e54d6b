// Mismatched shapes or dtypes reaching a kernel stop the process with a message naming the op and
// the offending arguments (never a segfault or silent garbage).
#include <gtest/gtest.h>

#include "lmt/kernels/backend.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

TEST(KernelValidationDeathTest, LinearInnerDimensionMismatchNamesOpAndShapes) {
  Tensor x({4, 768}, DType::kF32), w({3072, 769}, DType::kF32), y({4, 3072}, DType::kF32);
  EXPECT_DEATH(backend("cpu").linear_forward(y, x, w, TensorView()),
               "kernel 'linear_forward': weight must have shape \\[\\*,768\\], got f32\\[3072,769\\]");
}

TEST(KernelValidationDeathTest, MatmulDtypeMismatchIsNamed) {
  Tensor a({2, 3}, DType::kF32), b({3, 4}, DType::kBF16), c({2, 4}, DType::kF32);
  EXPECT_DEATH(backend("cpu").matmul(c, a, b, false, false, false), "kernel 'matmul': a and b must share a dtype");
}

TEST(KernelValidationDeathTest, AttentionHeadsNotMultipleOfKvHeads) {
  Tensor q({1, 4, 6, 8}, DType::kF32), k({1, 4, 4, 8}, DType::kF32), v({1, 4, 4, 8}, DType::kF32);
  Tensor out({1, 4, 6, 8}, DType::kF32), lse({1, 6, 4}, DType::kF32);
  EXPECT_DEATH(backend("cpu").attention_forward(AttentionBackend::kFlash, out, lse, q, k, v, TensorView(), 1.0f),
               "query heads NH=6 must be a multiple of key/value heads G=4");
}

TEST(KernelValidationDeathTest, CpuBackendRejectsF64WithOpName) {
  Tensor x({2, 8}, DType::kF64), w({8}, DType::kF64), out({2, 8}, DType::kF64), rstd({2}, DType::kF64);
  EXPECT_DEATH(backend("cpu").rmsnorm_forward(out, rstd, x, w, 1e-5f), "rmsnorm_forward.*f64");
}

TEST(KernelValidationDeathTest, MissingRequiredArgumentIsNamed) {
  Tensor x({2, 8}, DType::kF32), out({2, 8}, DType::kF32);
  EXPECT_DEATH(backend("cpu").activation_forward(Activation::kSilu, out, TensorView()),
               "kernel 'activation_forward'");
}

TEST(KernelValidationDeathTest, TargetOutsideVocabularyStops) {
  Tensor x({2, 8}, DType::kF32), w({5, 8}, DType::kF32), t({2}, DType::kI32), losses({2}, DType::kF32);
  t.as<int32_t>()[1] = 7;
  CrossEntropyOptions o;
  o.vocab_size = 5;
  EXPECT_DEATH(backend("cpu").lm_head_cross_entropy(losses, x, w, t, o, TensorView(), TensorView()),
               "target 7 outside \\[0, 5\\)");
}

}  // namespace
}  // namespace lmt::kernels
