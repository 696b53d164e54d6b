// The comparison of the universal op tests (op_test.cpp for the cpu backend, cuda/cuda_op_test.cpp
// for cuda): a backend's result against ref's, every element within scale·(atol + rtol·|ref|), and
// bf16 results bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lmt/base/bf16.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::testing {

inline double value_at(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.as<float>()[i];
    case DType::kF64: return t.as<double>()[i];
    case DType::kBF16: return static_cast<float>(t.as<bf16>()[i]);
    default: return t.as<int32_t>()[i];
  }
}

// `fast` and `ref` in host memory; `scale` is the case's tolerance_scale.
inline void expect_close(const std::string& what, const TensorView& fast, const TensorView& ref, double scale,
                         double atol, double rtol) {
  ASSERT_EQ(fast.numel(), ref.numel()) << what;
  if (fast.dtype() == DType::kBF16) {
    for (int64_t i = 0; i < fast.numel(); ++i)
      ASSERT_EQ(fast.as<bf16>()[i].bits, ref.as<bf16>()[i].bits)
          << what << "[" << i << "] bf16 differs: fast " << value_at(fast, i) << " ref " << value_at(ref, i);
    return;
  }
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < fast.numel(); ++i) {
    const double c = value_at(fast, i), r = value_at(ref, i);
    ASSERT_TRUE(std::isfinite(c)) << what << "[" << i << "] is " << c << " (ref " << r << ")";
    const double ratio = std::abs(c - r) / (scale * (atol + rtol * std::abs(r)));
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  EXPECT_LE(worst, 1.0) << what << "[" << worst_i << "]: fast " << value_at(fast, worst_i) << " ref "
                        << value_at(ref, worst_i) << " (error " << worst << "× the tolerance)";
}

// ‖got − want‖ / ‖want‖ (Frobenius); where want is all zero, the root mean square of got instead.
inline double relative_distance(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = static_cast<double>(got[i]) - want[i];
    e += diff * diff;
    n += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(e / (n > 0 ? n : static_cast<double>(got.size())));
}

}  // namespace lmt::testing
