// Small vector-math helpers shared by the cpu kernels.
//
// vexp(x): e^x for one f32x16 (16 floats as a GCC vector: one zmm register with AVX-512, two ymm
// halves in the portable x86-64-v3 build) or one f32reg (a zmm, or a ymm without AVX-512), ~1 ulp
// (Cephes polynomial); exactly 0 below -87.3 (so -inf, a masked score, becomes a probability of 0
// and softmax needs no mask), saturating above 88.3. This is the one vector exp of the cpu kernels:
// flash attention calls it on f32reg values, the AVX-512 intrinsic code (loss, activations,
// softmax) as exp16() on an __m512, the same register.
// With AVX-512 both are one implementation with explicit FMAs, so every build (-O1 sanitizer or
// -O3, any -march with AVX-512) rounds alike: tests that compare layouts to 1e-6 after several
// Adam steps depend on it. With AVX2 (no AVX-512) vexp is exp8() on each half, the same polynomial
// with explicit FMAs on 8 lanes; with neither, GCC vector operators.
// hsum(v): horizontal sum of 16 floats. Both have a scalar fallback for non-AVX-512 builds.
// transpose16(r): a 16 × 16 matrix of 32-bit words (floats or bf16 pairs) transposed in registers
// (AVX-512 only: its callers have scalar paths or exist only there); transpose8(r), 8 × 8 floats,
// its AVX2 form.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// AVX2 + FMA without AVX-512 (e.g. AMD Zen 2/3, Intel before Skylake-X): the hot pointwise kernels
// (activations, AdamW, f32<->bf16, axpby, softmax's max and exp-sum) take 8-lane forms of their
// AVX-512 code (same operations in the same order), written against this macro, as does the decode
// GEMV's micro-tile (linear_bf16w.cpp); the others (norms, RoPE, add/scale, sums of squares) keep
// plain loops there, which GCC vectorises.
#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define LMT_SIMD_AVX2 1
#endif

namespace lmt::kernels::simd {

using f32x16 = float __attribute__((vector_size(64), __may_alias__));
using i32x16 = int32_t __attribute__((vector_size(64), __may_alias__));
// One register of floats: a zmm (16) with AVX-512, a ymm (8) otherwise. Register-blocked
// micro-kernels hold their accumulators in these: GCC lowers arrays of 64-byte vectors on AVX2 to
// stack traffic (pairs of xmm moves), so f32x16 is for memory layouts and elementwise code only.
#ifdef __AVX512F__
using f32reg = f32x16;
#else
using f32reg = float __attribute__((vector_size(32), __may_alias__));
#endif
inline constexpr int kRegLanes = static_cast<int>(sizeof(f32reg) / sizeof(float));

// Without AVX-512 a 64-byte vector argument or result changes the ABI; these helpers are always
// inlined, so no call crosses that boundary.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

[[gnu::always_inline]] inline f32x16 splat(float x) { return f32x16{} + x; }

// Asks for the cache lines of p[0, n) ahead of their use (a hint; null p: nothing). The attention
// packers read rows of q, k, v, dO and O that lie a whole token (NH·HD or G·HD floats) apart, which
// the hardware prefetchers did not follow: asking for the rows 8 ahead made `bench attention`'s
// backward ~12% faster and the training step's attention 56.7 → 49.0 ms (Zen 5, B4 T256 bf16;
// docs/PERFORMANCE.md).
[[gnu::always_inline]] inline void prefetch_row(const float* p, int64_t n) {
  if (p == nullptr) return;
  for (int64_t b = 0; b < n * static_cast<int64_t>(sizeof(float)); b += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(p) + b);
}

#ifdef __AVX512F__
// The AVX-512 form, with explicit FMAs: GCC does not contract the generic form's a·b + c into FMAs
// at every optimisation level, and the rounding of each step must not depend on the build.
[[gnu::always_inline]] inline __m512 exp16(__m512 x) {
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

[[gnu::always_inline]] inline f32x16 vexp(const f32x16& in) { return (f32x16)exp16((__m512)in); }
#else
#ifdef LMT_SIMD_AVX2
// exp16's 8-lane AVX2 form: the same polynomial and explicit FMAs; p · 2^n through the exponent
// bits (n in [-126, 127] after the clamps, so 2^n is a normal float and the product rounds as
// vscalefps does).
[[gnu::always_inline]] inline __m256 exp8(__m256 x) {
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 representable = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_to_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(two_to_n)), representable);  // 0 below -87.3
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// vexp on AVX2: exp8 on each half (GCC's lowering of the generic form below went through the stack).
[[gnu::always_inline]] inline f32x16 vexp(const f32x16& in) {
  union Halves {
    f32x16 v;
    __m256 h[2];
  } u{in};
  u.h[0] = exp8(u.h[0]);
  u.h[1] = exp8(u.h[1]);
  return u.v;
}
// vexp of one register (f32reg is a ymm here).
[[gnu::always_inline]] inline f32reg vexp(const f32reg& in) { return (f32reg)exp8((__m256)in); }
#else
// The generic form (builds with neither AVX-512 nor AVX2), for any width of vector: V holds floats,
// I as many int32.
template <typename V, typename I>
[[gnu::always_inline]] inline V vexp_portable(const V& in) {
  V x = in;
  const V zero_below = x < -87.3f ? V{} : V{} + 1.0f;
  x = x < -87.3f ? V{} - 87.3f : x;
  x = x > 88.3f ? V{} + 88.3f : x;
  // Round x·log2(e) to the nearest integer n: adding 1.5·2^23 leaves n in the low mantissa bits.
  const float kRoundMagic = 12582912.0f;
  const V shifted = x * 1.44269504088896341f + kRoundMagic;
  const V n = shifted - kRoundMagic;
  const V r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n·ln2 in two parts
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V poly = p * r * r + r + 1.0f;
  const I n_int = (I)shifted - (I)(V{} + kRoundMagic);
  const V two_to_n = (V)((n_int + 127) << 23);
  return poly * two_to_n * zero_below;
}
using i32x8 = int32_t __attribute__((vector_size(32), __may_alias__));
[[gnu::always_inline]] inline f32x16 vexp(const f32x16& in) { return vexp_portable<f32x16, i32x16>(in); }
[[gnu::always_inline]] inline f32reg vexp(const f32reg& in) { return vexp_portable<f32reg, i32x8>(in); }
#endif

#endif

#pragma GCC diagnostic pop

#ifdef __AVX512F__
inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

// r[i] ← column i of the 16 × 16 matrix of 32-bit words whose rows r[0..15] hold.
[[gnu::always_inline]] inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane L: t[2i], t[2i + 1] = rows 2i, 2i+1 of columns 4L..4L+3
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + k], lane L: rows 4i..4i+3 of column 4L + k
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {  // column 4L + k: lane L of u[k], u[4 + k], u[8 + k], u[12 + k]
    const __m512i a = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x88), b = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xdd);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x88), d = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xdd);
    r[k] = _mm512_shuffle_i32x4(a, c, 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(a, c, 0xdd);
    r[4 + k] = _mm512_shuffle_i32x4(b, d, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(b, d, 0xdd);
  }
}
#endif

#ifdef LMT_SIMD_AVX2
// r[i] ← column i of the 8 × 8 matrix of floats whose rows r[0..7] hold.
[[gnu::always_inline]] inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane L: t[2i], t[2i + 1] = rows 2i, 2i+1 of columns 4L..4L+3
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // u[4i + k], lane L: rows 4i..4i+3 of column 4L + k
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {  // column k: lane 0 of u[k] and u[4 + k]; column 4 + k: their lane 1
    r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}
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
#elif defined(LMT_SIMD_AVX2)
  __m256 acc = _mm256_setzero_ps();
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(in + i), s));
    _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {  // the tail through exp8 too (lanes past n: -inf, whose exp8 is 0), as exp16's masked tail
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(in + i, m), _mm256_castsi256_ps(m));
    const __m256 e = exp8(_mm256_sub_ps(x, s));
    _mm256_maskstore_ps(out + i, m, e);
    acc = _mm256_add_ps(acc, e);
    i = n;
  }
  sum = hsum8(acc);
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
#elif defined(LMT_SIMD_AVX2)
  __m256 m = _mm256_set1_ps(-INFINITY);
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(in + i));
  mx = hmax8(m);
#endif
  for (; i < n; ++i) mx = in[i] > mx ? in[i] : mx;
  return mx;
}

}  // namespace lmt::kernels::simd
