// bf16: the upper 16 bits of an IEEE-754 binary32.
//
// float -> bf16 rounds to nearest, ties to even (as PyTorch, oneDNN and the AVX512-BF16
// `vcvtneps2bf16` instruction do). NaN stays NaN (quiet, sign kept), +-Inf stays +-Inf, and finite
// values whose rounding overflows become +-Inf. bf16 -> float is exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace lmt {

struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  static constexpr bf16 from_bits(uint16_t b) { bf16 r; r.bits = b; return r; }
  explicit bf16(float f) : bits(round_from_float(f)) {}
  explicit operator float() const { return to_float(bits); }

  static inline uint16_t round_from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force a quiet-NaN payload
      return static_cast<uint16_t>((u >> 16) | 0x0040u);
    }
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;  // round to nearest even; carries into the exponent (to Inf) correctly
    return static_cast<uint16_t>(u >> 16);
  }
  static inline float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
};
static_assert(sizeof(bf16) == 2);

}  // namespace lmt
