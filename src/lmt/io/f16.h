// IEEE-754 binary16 (half, safetensors "F16") -> binary32, exact for every input:
// normals, subnormals (value = mantissa · 2^-24), signed zeros, ±Inf and NaN (payload kept).
#pragma once

#include <cstdint>
#include <cstring>

namespace lmt::io {

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // Inf or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);  // rebias the exponent
  } else {
    // Zero or subnormal: every half subnormal is a normal float, computed exactly.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&bits, &magnitude, sizeof(bits));
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace lmt::io
