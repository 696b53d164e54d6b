// for_each_vector: the loop shape of the pointwise and row kernels (norm, activation, rope,
// elementwise): whole 16-float vectors, then one masked tail, so any length works without a scalar
// remainder loop (for_each_vector8: the same with 8-float AVX2 vectors).
//
// The body gets (offset, mask) and uses masked loads/stores throughout. In the main loop the mask is
// the constant 0xffff, which the compiler folds into plain loads and stores; that matters because
// masked stores are slower and do not forward to later loads (a row kernel re-reading its own
// partial sums stalls on them).
#pragma once

#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>

namespace lmt::kernels::simd {

// Lanes [0, remaining) of a 16-lane mask: all 16 from 16 up, none at 0 or below.
inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16  ? static_cast<__mmask16>(0xffff)
         : remaining <= 0 ? static_cast<__mmask16>(0)
                          : static_cast<__mmask16>((1u << remaining) - 1u);
}

template <typename Body>
inline void for_each_vector(int64_t n, const Body& body) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) body(i, static_cast<__mmask16>(0xffff));
  if (i < n) body(i, tail_mask(n - i));
}

}  // namespace lmt::kernels::simd
#elif !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace lmt::kernels::simd {

// The AVX2 form: whole 8-float vectors, then one masked tail (vmaskmovps). The body gets (offset,
// lanes) and loads and stores through load8/store8, whose full-vector case the compiler folds.
[[gnu::always_inline]] inline __m256i lanes_mask8(int lanes) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
[[gnu::always_inline]] inline __m256 load8(const float* p, int lanes) {
  return lanes >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes_mask8(lanes));
}
[[gnu::always_inline]] inline void store8(float* p, int lanes, __m256 v) {
  if (lanes >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, lanes_mask8(lanes), v);
}

template <typename Body>
inline void for_each_vector8(int64_t n, const Body& body) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) body(i, 8);
  if (i < n) body(i, static_cast<int>(n - i));
}

}  // namespace lmt::kernels::simd
#endif
