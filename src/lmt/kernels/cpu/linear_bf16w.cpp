// cpu: linear forward with bf16 weights and f32 activations (weight-only bf16, for decoding).
//
// out[N,OC] = inp[N,C] (f32) · weight[OC,C] (bf16)ᵀ + bias[OC] (f32). Decoding reads every weight
// once per token at N = 1..8, so it is bound by the bytes of the weights: bf16 halves them. Each
// weight element is widened to f32 exactly (bf16 is the top half of an f32) and multiplied in f32,
// so the activations are never rounded: the result is the f32 GEMM of the bf16-rounded weights.
//
// Blocking: threads split OC into blocks of 4 weight rows; a block runs over the N rows 4 at a time
// with 16 zmm accumulators (4 rows × 4 weight rows) over C in steps of 16 (masked tail), then
// reduces each accumulator horizontally. The 4 weight rows (8·C bytes) stay in L1 while the N rows
// pass, so at large N (prefill chunks) the weights are still read from memory once. On AVX2 the
// micro-tile takes 2 activation rows at a time (8 ymm accumulators, 4 widened weight vectors: the
// 16 ymm registers hold them without spilling) over C in steps of 8, the last C mod 8 products
// added after the horizontal sum. Each output's sum depends on its row alone, never on how many
// rows share the tile (batched decoding equals one row at a time). Otherwise the loops are scalar
// (`omp simd`).
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "lmt/base/bf16.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"

namespace lmt::kernels {
namespace {

constexpr int64_t kRows = 4, kCols = 4;  // activation rows × weight rows per micro-tile

#ifdef __AVX512F__
[[gnu::always_inline]] inline __m512 widen(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// out rows [0, RN) × weight rows [0, RO) of one micro-tile (row strides C for x, w; OC for out).
template <int RN, int RO>
void tile(float* out, int64_t OC, const float* x, const uint16_t* w, int64_t C, const float* bias) {
  __m512 acc[RN][RO];
  for (int r = 0; r < RN; ++r)
    for (int o = 0; o < RO; ++o) acc[r][o] = _mm512_setzero_ps();
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = C - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (C - c)) - 1);
    __m512 wv[RO];
    for (int o = 0; o < RO; ++o) wv[o] = widen(w + o * C + c, m);
    for (int r = 0; r < RN; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + r * C + c);
      for (int o = 0; o < RO; ++o) acc[r][o] = _mm512_fmadd_ps(xv, wv[o], acc[r][o]);
    }
  }
  for (int r = 0; r < RN; ++r)
    for (int o = 0; o < RO; ++o) out[r * OC + o] = _mm512_reduce_add_ps(acc[r][o]) + (bias ? bias[o] : 0.0f);
}
#elif defined(LMT_SIMD_AVX2)
[[gnu::always_inline]] inline __m256 widen8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Up to 2 activation rows (RN) × RO weight rows.
template <int RN, int RO>
void tile_pair(float* out, int64_t OC, const float* x, const uint16_t* w, int64_t C, const float* bias) {
  __m256 acc[RN][RO];
  for (int r = 0; r < RN; ++r)
    for (int o = 0; o < RO; ++o) acc[r][o] = _mm256_setzero_ps();
  const int64_t c8 = C / 8 * 8;
  for (int64_t c = 0; c < c8; c += 8) {
    __m256 wv[RO];
    for (int o = 0; o < RO; ++o) wv[o] = widen8(w + o * C + c);
    for (int r = 0; r < RN; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * C + c);
      for (int o = 0; o < RO; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
    }
  }
  for (int r = 0; r < RN; ++r)
    for (int o = 0; o < RO; ++o) {
      float sum = simd::hsum8(acc[r][o]);
      for (int64_t c = c8; c < C; ++c) sum += x[r * C + c] * bf16::to_float(w[o * C + c]);
      out[r * OC + o] = sum + (bias ? bias[o] : 0.0f);
    }
}

template <int RN, int RO>
void tile(float* out, int64_t OC, const float* x, const uint16_t* w, int64_t C, const float* bias) {
  if constexpr (RN <= 2) {
    tile_pair<RN, RO>(out, OC, x, w, C, bias);
  } else {  // the weight rows stay in L1 for the second pass
    tile_pair<2, RO>(out, OC, x, w, C, bias);
    tile_pair<RN - 2, RO>(out + 2 * OC, OC, x + 2 * C, w, C, bias);
  }
}
#else
template <int RN, int RO>
void tile(float* out, int64_t OC, const float* x, const uint16_t* w, int64_t C, const float* bias) {
  for (int r = 0; r < RN; ++r)
    for (int o = 0; o < RO; ++o) {
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += x[r * C + c] * bf16::to_float(w[o * C + c]);
      out[r * OC + o] = s + (bias ? bias[o] : 0.0f);
    }
}
#endif

template <int RN>
void tile_rows(int64_t ro, float* out, int64_t OC, const float* x, const uint16_t* w, int64_t C, const float* bias) {
  switch (ro) {
    case 1: tile<RN, 1>(out, OC, x, w, C, bias); break;
    case 2: tile<RN, 2>(out, OC, x, w, C, bias); break;
    case 3: tile<RN, 3>(out, OC, x, w, C, bias); break;
    default: tile<RN, 4>(out, OC, x, w, C, bias); break;
  }
}

}  // namespace

void linear_forward_bf16_weights(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N,
                                 int64_t C, int64_t OC) {
  const int64_t blocks = (OC + kCols - 1) / kCols;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), blocks));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o0 = b * kCols, ro = std::min(kCols, OC - o0);
    const uint16_t* w = weight + o0 * C;
    const float* bb = bias ? bias + o0 : nullptr;
    for (int64_t n = 0; n < N; n += kRows) {
      float* o = out + n * OC + o0;
      const float* x = inp + n * C;
      switch (std::min(kRows, N - n)) {
        case 1: tile_rows<1>(ro, o, OC, x, w, C, bb); break;
        case 2: tile_rows<2>(ro, o, OC, x, w, C, bb); break;
        case 3: tile_rows<3>(ro, o, OC, x, w, C, bb); break;
        default: tile_rows<4>(ro, o, OC, x, w, C, bb); break;
      }
    }
  }
}

}  // namespace lmt::kernels
