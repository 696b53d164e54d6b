// The bf16 products of the cpu flash attention (attention.cpp, compute bf16 on CPUs with
// AVX512-BF16). vdpbf16ps multiplies 16 pairs of bf16 values by 16 other pairs and adds each lane's
// two products to an f32 accumulator, so the operands are stored as pairs along the reduction
// dimension: one uint32 holds two bf16 values (the lower index in the low half), and a 64-byte vector
// of 16 uint32 holds one pair for each of 16 output columns. Everything else of the algorithm (the
// online softmax, masks, accumulators, lse) stays f32 in attention.cpp.
//
// Layouts (u32 = one bf16 pair; k indexes pairs (2k, 2k + 1) of the reduction dimension):
//   A pairs   a[r][k] = (A[r][2k], A[r][2k + 1])   the row operand, broadcast one pair at a time
//   B pairs   b[k][c] = (B[2k][c], B[2k + 1][c])   the column operand, 16 columns c per vector
// Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "lmt/base/bf16.h"
#include "lmt/kernels/cpu/attention_causal_tile.h"
#include "lmt/kernels/cpu/simd.h"
#include "lmt/kernels/cpu/vector_loop.h"

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

namespace lmt::kernels::cpu_bf16 {

// Whether this build has the bf16 products (else attention.cpp computes in f32 whatever is asked).
#ifdef __AVX512BF16__
inline constexpr bool kAvailable = true;
#else
inline constexpr bool kAvailable = false;
#endif

// (lo, hi) rounded to bf16 (nearest, ties to even) as one pair.
inline uint32_t pair(float lo, float hi) {
  return uint32_t(bf16::round_from_float(lo)) | (uint32_t(bf16::round_from_float(hi)) << 16);
}

#ifdef __AVX512BF16__
using cpu_attention::kRowBlock;  // rows per register block (4 × 4 accumulators)

// One block of kRowBlock rows × kVecs vectors of tile_scores.
template <int kVecs>
[[gnu::always_inline]] inline void score_block(float* s, const uint32_t* a, int64_t a_stride, const uint32_t* bt,
                                               int64_t depth) {
  __m512 acc[kRowBlock][kVecs];
  for (int r = 0; r < kRowBlock; ++r)
    for (int c = 0; c < kVecs; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    __m512bh b[kVecs];
    for (int c = 0; c < kVecs; ++c) b[c] = (__m512bh)_mm512_loadu_si512(bt + k * 64 + c * 16);
    for (int r = 0; r < kRowBlock; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * a_stride + k]));
      for (int c = 0; c < kVecs; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], ar, b[c]);
    }
  }
  for (int r = 0; r < kRowBlock; ++r)
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(s + r * 64 + c * 16, acc[r][c]);
}

// s[r][0:64] = Σ_k a[r·a_stride + k] · bt[k][0:64] over k < depth (pairs): a tile of scores from A
// pairs of the rows and B pairs of 64 keys, for r < rows (a multiple of 4). Only the keys that
// `tile` leaves visible to each block of rows are computed; the other columns are set to 0.
inline void tile_scores(float* s, const uint32_t* a, int64_t a_stride, const uint32_t* bt, int64_t depth, int rows,
                        const cpu_attention::CausalTile& tile) {
  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int vecs = tile.key_vecs(r0 + kRowBlock - 1, 4, 16);
    float* sb = s + r0 * 64;
    const uint32_t* ab = a + r0 * a_stride;
    switch (vecs) {
      case 4: score_block<4>(sb, ab, a_stride, bt, depth); break;
      case 3: score_block<3>(sb, ab, a_stride, bt, depth); break;
      case 2: score_block<2>(sb, ab, a_stride, bt, depth); break;
      default: score_block<1>(sb, ab, a_stride, bt, depth); break;
    }
    for (int r = 0; r < kRowBlock; ++r)
      for (int c = vecs; c < 4; ++c) _mm512_storeu_ps(sb + r * 64 + c * 16, _mm512_setzero_ps());
  }
}

// A [rows][cols] f32 tile (cols a multiple of 16) in bf16, row by row: dst[r][k] is the pair
// (src[r][2k], src[r][2k + 1]), the A pairs of the tile.
inline void to_bf16_rows(uint32_t* dst, const float* src, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; c += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (r * cols + c) / 2),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + r * cols + c)));
}

// dst[k][c] = (src[2k][c], src[2k + 1][c]) for a [rows][cols] f32 tile (rows even, cols a multiple
// of 16): the B pairs of the tile's rows (or, read with a stride, the A pairs of its transpose).
inline void interleave_rows(uint32_t* dst, const float* src, int rows, int cols) {
  for (int k = 0; k < rows / 2; ++k)
    for (int c = 0; c < cols; c += 16) {
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + 2 * k * cols + c)));
      const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + (2 * k + 1) * cols + c)));
      _mm512_storeu_si512(dst + k * cols + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}

// c[r][:] += Σ_k w[r·w_row + k·w_inner] · x[k][:] over k < inner (pairs), for r < rows (a multiple of
// 4); rows of c and x are `width` elements (a multiple of 16). The strides let one kernel read the
// pairs of a tile (w_row = pairs per row, w_inner = 1) or of its transpose (interleave_rows:
// w_row = 1, w_inner = the tile's columns).
template <int kVecs>
inline void accumulate_block(float* c, const uint32_t* w, int64_t w_row, int64_t w_inner, const uint32_t* x,
                             int64_t width, int64_t inner) {
  __m512 acc[kRowBlock][kVecs];
  for (int r = 0; r < kRowBlock; ++r)
    for (int e = 0; e < kVecs; ++e) acc[r][e] = _mm512_loadu_ps(c + r * width + e * 16);
#pragma GCC unroll 4
  for (int64_t k = 0; k < inner; ++k) {
    __m512bh xk[kVecs];
    for (int e = 0; e < kVecs; ++e) xk[e] = (__m512bh)_mm512_loadu_si512(x + k * width + e * 16);
    for (int r = 0; r < kRowBlock; ++r) {
      const __m512bh wr = (__m512bh)_mm512_set1_epi32(static_cast<int>(w[r * w_row + k * w_inner]));
      for (int e = 0; e < kVecs; ++e) acc[r][e] = _mm512_dpbf16_ps(acc[r][e], wr, xk[e]);
    }
  }
  for (int r = 0; r < kRowBlock; ++r)
    for (int e = 0; e < kVecs; ++e) _mm512_storeu_ps(c + r * width + e * 16, acc[r][e]);
}

// The packers of K and V (attention.cpp packs them once per (batch, kv head)); rounding as
// _mm512_cvtneps_pbh, like every operand here. Masks of the first lanes: simd::tail_mask.

// dst[k] = pair(src[2k], src[2k + 1]) for k < pairs (a multiple of 8), the floats past n zeros.
inline void row_to_pairs(uint32_t* dst, const float* src, int64_t n, int64_t pairs) {
  for (int64_t k = 0; k < pairs; k += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(simd::tail_mask(n - 2 * k), src + 2 * k)));
}

// The B pairs of one tile of kKeyCols keys: dst[k][c] = pair(rows[c][2k], rows[c][2k + 1]) for
// k < pairs (a multiple of 8), c < kKeyCols; floats past n, and null rows (keys past T), are zeros.
// Each key's pairs are made with vector conversions into a small [key][pair] block, which is then
// written transposed 16 × 16 words at a time in registers (element by element, the transposition
// took 12% of attention forward and backward at T = 256 on Zen 5).
inline constexpr int kKeyCols = 64;
inline void key_tile_pairs(uint32_t* dst, const float* const* rows, int64_t n, int64_t pairs) {
  constexpr int64_t kChunk = 32;  // pairs per pass: the block is kKeyCols × kChunk × 4 B = 8 KiB
  alignas(64) uint32_t block[kKeyCols][kChunk];
  for (int64_t k0 = 0; k0 < pairs; k0 += kChunk) {
    const int64_t kn = pairs - k0 < kChunk ? pairs - k0 : kChunk;
    for (int c = 0; c < kKeyCols; ++c) {
      if (c + 8 < kKeyCols && rows[c + 8] != nullptr) simd::prefetch_row(rows[c + 8] + 2 * k0, 2 * kn);
      const int64_t made = rows[c] != nullptr ? kn : 0;
      if (made > 0) row_to_pairs(block[c], rows[c] + 2 * k0, n - 2 * k0, kn);
      // Zeros for a key past T, and for the last 16-word group's unused half (read below).
      for (int64_t k = made; k < kn || k % 16 != 0; ++k) block[c][k] = 0;
    }
    for (int64_t q0 = 0; q0 < kn; q0 += 16)  // kn is a multiple of 8: the last group may hold 8 pairs
      for (int c0 = 0; c0 < kKeyCols; c0 += 16) {
        __m512i v[16];
        for (int i = 0; i < 16; ++i) v[i] = _mm512_load_si512(&block[c0 + i][q0]);  // within the 32-wide block
        simd::transpose16(v);  // v[q]: pair q0 + q of keys c0..c0+15
        for (int64_t q = 0; q < 16 && q0 + q < kn; ++q) _mm512_storeu_si512(dst + (k0 + q0 + q) * kKeyCols + c0, v[q]);
      }
  }
}

// dst[e] = pair(r0[e], r1[e]) for e < width (a multiple of 16); elements past n, and a null r1, zeros.
inline void interleave_two_rows(uint32_t* dst, const float* r0, const float* r1, int64_t n, int64_t width) {
  for (int64_t e = 0; e < width; e += 16) {
    const __mmask16 m = simd::tail_mask(n - e);
    const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r0 + e)));
    const __m512i hi = r1 != nullptr
                           ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r1 + e)))
                           : _mm512_setzero_si512();
    _mm512_storeu_si512(dst + e, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

// c[r][:] += Σ_k w[r·w_row + k·w_inner] · x[k][:] for r < rows (a multiple of 4) and k in span(r0)
// (a cpu_attention::InnerSpan, in pairs): the part of the inner dimension that the block of rows
// [r0, r0 + 4) needs (causal trimming). Rows of c and x are `width` elements (a multiple of 16).
template <typename Span>
inline void tile_accumulate(float* c, const uint32_t* w, int64_t w_row, int64_t w_inner, const uint32_t* x,
                            int64_t width, int rows, const Span& span) {
  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const cpu_attention::InnerSpan in = span(r0);
    const uint32_t* wb = w + r0 * w_row + in.begin * w_inner;
    const uint32_t* xb = x + in.begin * width;
    const int64_t n = in.end - in.begin;
    for (int64_t d0 = 0; d0 < width; d0 += 64) {
      float* cb = c + r0 * width + d0;
      switch ((width - d0) / 16 < 4 ? (width - d0) / 16 : 4) {
        case 4: accumulate_block<4>(cb, wb, w_row, w_inner, xb + d0, width, n); break;
        case 3: accumulate_block<3>(cb, wb, w_row, w_inner, xb + d0, width, n); break;
        case 2: accumulate_block<2>(cb, wb, w_row, w_inner, xb + d0, width, n); break;
        default: accumulate_block<1>(cb, wb, w_row, w_inner, xb + d0, width, n); break;
      }
    }
  }
}
#else
// Without AVX512-BF16 nothing calls these (kAvailable is false); they exist so that call sites need
// no preprocessor branches.
inline void tile_scores(float*, const uint32_t*, int64_t, const uint32_t*, int64_t, int,
                        const cpu_attention::CausalTile&) {
  __builtin_trap();
}
inline void to_bf16_rows(uint32_t*, const float*, int, int) { __builtin_trap(); }
inline void interleave_rows(uint32_t*, const float*, int, int) { __builtin_trap(); }
inline constexpr int kKeyCols = 64;
inline void key_tile_pairs(uint32_t*, const float* const*, int64_t, int64_t) { __builtin_trap(); }
inline void interleave_two_rows(uint32_t*, const float*, const float*, int64_t, int64_t) { __builtin_trap(); }
template <typename Span>
inline void tile_accumulate(float*, const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t, int, const Span&) {
  __builtin_trap();
}
#endif

}  // namespace lmt::kernels::cpu_bf16
