// Small vector-math helpers shared by the cpu kernels.
//
// exp16(x): e^x for 16 floats (AVX-512), max relative error ~2e-7 on [-87, 88]; inputs below -87.3
// give 0 (flush), which is what softmax needs for masked or far-below-max entries.
// hsum(v): horizontal sum of 16 floats. Both have a scalar fallback for non-AVX-512 builds.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace lmt::kernels::simd {

#ifdef __AVX512F__
inline __m512 exp16(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693359375f);
  const __m512 ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __mmask16 representable = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.3f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  // Cephes expf polynomial on [-ln2/2, ln2/2].
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(representable, _mm512_scalef_ps(p, n));  // p * 2^n, 0 below -87.3
}

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
#endif

// out[i] = exp(in[i] - shift); returns Σ out[i]. in and out may alias.
inline float exp_shifted_sum(float* out, const float* in, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#ifdef __AVX512F__
  __m512 acc = _mm512_setzero_ps();
  const __m512 s = _mm512_set1_ps(shift);
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(in + i), s));
    _mm512_storeu_ps(out + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, in + i), s));
    _mm512_mask_storeu_ps(out + i, m, e);
    acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
    i = n;
  }
  sum = hsum(acc);
#endif
  for (; i < n; ++i) {
    out[i] = std::exp(in[i] - shift);
    sum += out[i];
  }
  return sum;
}

// max of in[0, n) (n > 0).
inline float max_of(const float* in, int64_t n) {
  int64_t i = 0;
  float mx = -INFINITY;
#ifdef __AVX512F__
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(in + i));
  mx = _mm512_reduce_max_ps(m);
#endif
  for (; i < n; ++i) mx = in[i] > mx ? in[i] : mx;
  return mx;
}

}  // namespace lmt::kernels::simd
