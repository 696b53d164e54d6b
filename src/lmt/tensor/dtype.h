// Element types that tensors can hold (devices: lmt/tensor/device.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lmt {

enum class DType : uint8_t { kF32, kBF16, kF64, kI32, kU16, kU32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kU16: return 2;
    case DType::kU32: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kU16: return "u16";
    case DType::kU32: return "u32";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF64; }

}  // namespace lmt
