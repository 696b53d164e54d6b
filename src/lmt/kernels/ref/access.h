// Element access by dtype for the ref backend: every value travels as double.
#pragma once

#include <cmath>
#include <cstdint>

#include "lmt/base/bf16.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::kernels::ref {

inline double ld(const TensorView& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return static_cast<const float*>(t.data())[i];
    case DType::kF64: return static_cast<const double*>(t.data())[i];
    case DType::kBF16: return bf16::to_float(static_cast<const uint16_t*>(t.data())[i]);
    case DType::kI32: return static_cast<const int32_t*>(t.data())[i];
    case DType::kU16: return static_cast<const uint16_t*>(t.data())[i];
    case DType::kU32: return static_cast<const uint32_t*>(t.data())[i];
  }
  return 0;
}

inline void st(const TensorView& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32: static_cast<float*>(t.data())[i] = static_cast<float>(v); return;
    case DType::kF64: static_cast<double*>(t.data())[i] = v; return;
    case DType::kBF16:
      static_cast<uint16_t*>(t.data())[i] = bf16::round_from_float(static_cast<float>(v));
      return;
    default: LMT_CHECK(false) << "ref store into " << t.to_string();
  }
}

inline void acc(const TensorView& t, int64_t i, double v) { st(t, i, ld(t, i) + v); }

inline int64_t id(const TensorView& t, int64_t i) { return static_cast<const int32_t*>(t.data())[i]; }

}  // namespace lmt::kernels::ref
