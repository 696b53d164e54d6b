// f32 <-> bf16 on raw bits, bit-identical to lmt::bf16 (base/bf16.h): round to nearest even, NaN kept
// quiet with its sign. The kernels use these rather than cuda_bf16.h's conversions so that a bf16
// mirror written on the GPU equals, bit for bit, the one the cpu and ref backends write.
#pragma once

#include <cstdint>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

LMT_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

LMT_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

LMT_HD uint16_t bf16_round(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

LMT_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

}  // namespace lmt::kernels::cuda_math
