// cpu: causal grouped-query attention, forward and backward, in two algorithms.
//
// kNaive materialises the T×T probabilities of one (batch, head) at a time in the workspace. It is
// simple on purpose: the baseline that kFlash is checked and timed against.
//
// kFlash is FlashAttention-2 on the CPU. Queries are cut into tiles of kQueryTile rows and keys into
// tiles of kKeyTile; each (query tile, key tile) pair is two small GEMMs on tiles that live in L1/L2,
// joined by an online softmax (running row max and sum), so no more than a tile of scores ever
// exists. The forward saves lse (natural log-sum-exp of the scaled scores); the backward recomputes
// the probabilities from it, tile by tile. Key tiles that no query of the tile can see (causal, and
// keys before the earliest document start of the tile) are skipped; tiles that are partly visible
// get the exact mask. On the tiles that the causal diagonal crosses, each block of 4 rows computes
// only the keys (or queries) it can see (attention_causal_tile.h): ~45% of such a tile's products
// and exps, with results bit-identical to computing the whole tile.
//
// Layouts: the GEMMs want contiguous vectors, so K is repacked once per call into key tiles
// transposed to [HD][kKeyTile] (a row of scores is then a broadcast-FMA over HD), and rows that are
// summed with weights (V, K, query tiles) are zero-padded to a multiple of 16 floats (HDp) so any HD
// works without tail code in the hot loops.
//
// Parallelism (OpenMP, one region per phase): forward over (query tile, batch, head) items, largest
// causal tiles first; backward over (batch, kv head) with the group's query heads inside, so the
// thread that owns a kv head accumulates its dk/dv alone (no atomics, deterministic).
//
// compute bf16 (on builds with AVX512-BF16): the same tiles and loops, but the products read bf16
// pairs (attention_bf16_tiles.h): q, k, v, dO packed once per call or tile, P and dS converted per
// tile; softmax, masks, accumulators and lse stay f32. Where the backend widens bf16 GEMMs
// (native_bf16_gemms() false: a bf16 unit slower than the fp32 FMAs), attention computes in f32 too.
//
// Vector code uses GCC vector extensions: one f32x16 (16 floats, the tiles' layout unit) is one
// AVX-512 register with -march=native and two AVX2 halves without AVX-512; the register-blocked
// micro-kernels and the softmax passes work on simd::f32reg (a zmm or a ymm) instead. The ISA
// #ifdefs: the block width (kBlockRegs), the horizontal max/sum, and the AVX2 key-tile transpose.
// Tiles: 64×64 (Br = Bc), the best measured on Zen 5 at HD = 64.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "lmt/kernels/cpu/attention_bf16_tiles.h"
#include "lmt/kernels/cpu/attention_causal_tile.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"

// The vector helpers below are internal and always inlined, so the x86-64-v3 note that returning a
// 64-byte vector without AVX-512 changes the ABI does not concern them.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace lmt::kernels {
namespace {

// ---- vector helpers ------------------------------------------------------------------------------

using simd::f32x16;
using simd::splat;
using simd::vexp;  // the one vector exp of the cpu kernels (simd.h)
constexpr int kLanes = 16;
constexpr float kInf = std::numeric_limits<float>::infinity();

[[gnu::always_inline]] inline f32x16& vec_at(float* p) { return *reinterpret_cast<f32x16*>(p); }
[[gnu::always_inline]] inline const f32x16& vec_at(const float* p) {
  return *reinterpret_cast<const f32x16*>(p);
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// y[0:n] += alpha · x[0:n]
void axpy(float* y, float alpha, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t e = 0; e < n; ++e) y[e] += alpha * x[e];
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---- problem description and scratch planning -----------------------------------------------------

struct Problem {
  int64_t B, T, NH, G, HD;
  float scale;
  const float* q;
  const float* k;
  const float* v;
  const int32_t* doc_ids;  // [B,T] or nullptr

  int64_t heads_per_group() const { return NH / G; }
  const float* q_row(int64_t b, int64_t t, int64_t h) const { return q + ((b * T + t) * NH + h) * HD; }
  const float* k_row(int64_t b, int64_t t, int64_t g) const { return k + ((b * T + t) * G + g) * HD; }
  const float* v_row(int64_t b, int64_t t, int64_t g) const { return v + ((b * T + t) * G + g) * HD; }
  int64_t q_offset(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * NH + h) * HD; }
  int64_t kv_offset(int64_t b, int64_t t, int64_t g) const { return ((b * T + t) * G + g) * HD; }
  bool visible(int64_t b, int64_t i, int64_t j) const {
    return j <= i && (!doc_ids || doc_ids[b * T + j] == doc_ids[b * T + i]);
  }
};

Problem make_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& doc_ids, float scale) {
  return {q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), scale, q.as<float>(), k.as<float>(),
          v.as<float>(), doc_ids.present() ? doc_ids.as<int32_t>() : nullptr};
}

// Consecutive 64-byte aligned regions of one buffer. With a null buffer it only measures, so the
// same layout code sizes the workspace request and then carves it (workspace() may move).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T = float>
  T* take(int64_t count) {
    T* at = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += static_cast<size_t>(round_up(count * static_cast<int64_t>(sizeof(T)), 64));
    return at;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// ---- kNaive -------------------------------------------------------------------------------------

// Scaled scores of query row i against keys [0, i] (masked ones -inf) into row[0, i].
void naive_score_row(const Problem& p, int64_t b, int64_t h, int64_t i, float* row) {
  const int64_t g = h / p.heads_per_group();
  const float* qi = p.q_row(b, i, h);
  for (int64_t j = 0; j <= i; ++j)
    row[j] = p.visible(b, i, j) ? p.scale * dot(qi, p.k_row(b, j, g), p.HD) : -kInf;
}

void naive_forward_head(const Problem& p, float* out, float* lse, int64_t b, int64_t h,
                        float* probs) {
  const int64_t T = p.T, g = h / p.heads_per_group();
  for (int64_t i = 0; i < T; ++i) naive_score_row(p, b, h, i, probs + i * T);
  for (int64_t i = 0; i < T; ++i) {
    float* row = probs + i * T;
    const float row_max = *std::max_element(row, row + i + 1);  // finite: key i is always visible
    const float row_sum = simd::exp_shifted_sum(row, row, i + 1, row_max);
    const float inv_sum = 1.0f / row_sum;
#pragma omp simd
    for (int64_t j = 0; j <= i; ++j) row[j] *= inv_sum;
    lse[(b * p.NH + h) * T + i] = row_max + std::log(row_sum);
  }
  for (int64_t i = 0; i < T; ++i) {
    float* o = out + p.q_offset(b, i, h);
    std::fill(o, o + p.HD, 0.0f);
    for (int64_t j = 0; j <= i; ++j)
      if (probs[i * T + j] != 0.0f) axpy(o, probs[i * T + j], p.v_row(b, j, g), p.HD);
  }
}

// Probabilities of head h from q, k and the saved lse, then every gradient row by row.
void naive_backward_head(const Problem& p, const float* dout, const float* out, const float* lse,
                         float* dq, float* dk, float* dv, int64_t b, int64_t h, float* probs,
                         float* dq_row) {
  const int64_t T = p.T, HD = p.HD, g = h / p.heads_per_group();
  for (int64_t i = 0; i < T; ++i) {
    float* row = probs + i * T;
    naive_score_row(p, b, h, i, row);
    simd::exp_shifted_sum(row, row, i + 1, lse[(b * p.NH + h) * T + i]);
  }
  for (int64_t i = 0; i < T; ++i) {
    const float* do_i = dout + p.q_offset(b, i, h);
    const float row_dot = dot(do_i, out + p.q_offset(b, i, h), HD);  // D_i = Σ_j P_ij dP_ij
    std::fill(dq_row, dq_row + HD, 0.0f);
    for (int64_t j = 0; j <= i; ++j) {
      const float pij = probs[i * T + j];
      if (pij == 0.0f) continue;
      const float ds = pij * (dot(do_i, p.v_row(b, j, g), HD) - row_dot) * p.scale;
      axpy(dq_row, ds, p.k_row(b, j, g), HD);
      axpy(dk + p.kv_offset(b, j, g), ds, p.q_row(b, i, h), HD);
      axpy(dv + p.kv_offset(b, j, g), pij, do_i, HD);
    }
    std::copy(dq_row, dq_row + HD, dq + p.q_offset(b, i, h));
  }
}

// ---- kFlash: tiles and micro-kernels ------------------------------------------------------------

constexpr int kQueryTile = 64;  // Br
constexpr int kKeyTile = 64;    // Bc
constexpr int kKeyVecs = kKeyTile / kLanes;
using cpu_attention::CausalTile;
using cpu_attention::InnerSpan;
using cpu_attention::kRowBlock;  // rows per register block: 4 rows × 4 vectors = 16 accumulators
static_assert(kKeyTile % kQueryTile == 0 && kQueryTile % kRowBlock == 0 && kKeyTile % kRowBlock == 0);
// Register vectors (simd::f32reg) per row of a register block of kRowBlock rows: with AVX-512 4
// zmm, 16 accumulators of 32 registers; AVX2 has 16 ymm in all, so 3 there (12 accumulators, 3
// operand rows, 1 broadcast). Written on 16-float vectors, the AVX2 kernels spilled every accumulator
// and `bench attention` ran at 2.7% of the peak (Zen 3).
using simd::f32reg;
using simd::kRegLanes;
#ifdef __AVX512F__
constexpr int kBlockRegs = 4;
#else
constexpr int kBlockRegs = 3;
#endif
static_assert(kLanes % kRegLanes == 0);

// Registers of the next block when `remaining` are left of a row: kBlockRegs, except that AVX2 splits
// 4 as 2 + 2, not 3 + 1: a block of one register holds 4 accumulators, too few FMA chains to hide
// the FMA latency (4 cycles, 2 pipes on Zen 3), so at HD = 32 (4 ymm per row) the 3 + 1 split ran
// its last block at half speed.
constexpr int next_block_regs(int64_t remaining) {
  if (kBlockRegs == 3 && remaining == 4) return 2;
  return static_cast<int>(std::min<int64_t>(kBlockRegs, remaining));
}

int64_t padded_head_dim(int64_t HD) { return round_up(HD, kLanes); }
int64_t padded_length(int64_t T) { return round_up(T, kKeyTile); }  // a multiple of both tiles

[[gnu::always_inline]] inline f32reg& reg_at(float* p) { return *reinterpret_cast<f32reg*>(p); }
[[gnu::always_inline]] inline const f32reg& reg_at(const float* p) { return *reinterpret_cast<const f32reg*>(p); }
constexpr int kRegsPerVec = kLanes / kRegLanes;  // 1 with AVX-512, 2 with AVX2
constexpr int kKeyRegs = kKeyTile / kRegLanes;

// Horizontal max and sum of one register, lane 0 first (AVX2: shuffles; a scalar chain through the
// stack over the 16 lanes of an f32x16 was ~15% of `bench attention` at HD = 32 on Zen 3).
float horizontal_max(const f32reg& v) {
#ifdef LMT_SIMD_AVX2
  return simd::hmax8((__m256)v);
#else
  float m = v[0];
  for (int i = 1; i < kRegLanes; ++i) m = std::max(m, v[i]);
  return m;
#endif
}
float horizontal_sum(const f32reg& v) {
#ifdef LMT_SIMD_AVX2
  return simd::hsum8((__m256)v);
#else
  float s = 0.0f;
  for (int i = 0; i < kRegLanes; ++i) s += v[i];
  return s;
#endif
}

// Makes GCC keep v in a register: left alone, it re-reads a vector that several FMAs share from
// memory in each of them, and one load per FMA makes the micro-kernels load-bound.
[[gnu::always_inline]] inline f32reg in_register(const f32reg& value) {
  f32reg v = value;
#if defined(__AVX512F__) || defined(__AVX__)  // a register that holds an f32reg
  asm("" : "+v"(v));
#endif
  return v;
}

// One block of kRowBlock rows × kRegs registers of tile_scores.
template <int kRegs>
[[gnu::always_inline]] inline void score_block(float* s, const float* a, int64_t a_stride, const float* bt,
                                               int64_t depth) {
  f32reg acc[kRowBlock][kRegs] = {};
  for (int64_t d = 0; d < depth; ++d) {
    f32reg bt_row[kRegs];
#pragma GCC unroll 4
    for (int c = 0; c < kRegs; ++c) bt_row[c] = in_register(reg_at(bt + d * kKeyTile + c * kRegLanes));
#pragma GCC unroll 4
    for (int r = 0; r < kRowBlock; ++r) {
      const float ar = a[r * a_stride + d];
#pragma GCC unroll 4
      for (int c = 0; c < kRegs; ++c) acc[r][c] += ar * bt_row[c];
    }
  }
  for (int r = 0; r < kRowBlock; ++r)
    for (int c = 0; c < kRegs; ++c) reg_at(s + r * kKeyTile + c * kRegLanes) = acc[r][c];
}

// s[r][0:kKeyTile] = Σ_d a[r·a_stride + d] · bt[d][0:kKeyTile] for r < rows: only the keys that
// `tile` leaves visible to each block of rows; the other columns are set to 0.
void tile_scores(float* s, const float* a, int64_t a_stride, const float* bt, int64_t depth, int rows,
                 const CausalTile& tile) {
  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int vecs = tile.key_vecs(r0 + kRowBlock - 1, kKeyVecs, kLanes);
    const int regs = vecs * (kLanes / kRegLanes);
    float* sb = s + r0 * kKeyTile;
    const float* ab = a + r0 * a_stride;
    static_assert(kKeyVecs == 4);
    for (int c0 = 0, width = 0; c0 < regs; c0 += width) {
      float* sc = sb + c0 * kRegLanes;
      const float* btc = bt + c0 * kRegLanes;
      switch (width = next_block_regs(regs - c0)) {
        case 4: score_block<4>(sc, ab, a_stride, btc, depth); break;
        case 3: score_block<3>(sc, ab, a_stride, btc, depth); break;
        case 2: score_block<2>(sc, ab, a_stride, btc, depth); break;
        default: score_block<1>(sc, ab, a_stride, btc, depth); break;
      }
    }
    for (int r = 0; r < kRowBlock; ++r)
      for (int c = vecs; c < kKeyVecs; ++c) vec_at(sb + r * kKeyTile + c * kLanes) = f32x16{};
  }
}

// One block of kRowBlock rows × kRegs registers of tile_accumulate, held in registers over `inner`.
template <int kRegs>
[[gnu::always_inline]] inline void accumulate_block(float* c, const float* w, int64_t w_row,
                                                    int64_t w_inner, const float* x, int64_t width,
                                                    int64_t inner) {
  f32reg acc[kRowBlock][kRegs];
#pragma GCC unroll 4
  for (int r = 0; r < kRowBlock; ++r)
#pragma GCC unroll 4
    for (int e = 0; e < kRegs; ++e) acc[r][e] = reg_at(c + r * width + e * kRegLanes);
#pragma GCC unroll 4
  for (int64_t t = 0; t < inner; ++t) {
    f32reg xt[kRegs];
#pragma GCC unroll 4
    for (int e = 0; e < kRegs; ++e) xt[e] = in_register(reg_at(x + t * width + e * kRegLanes));
#pragma GCC unroll 4
    for (int r = 0; r < kRowBlock; ++r) {
      const float wt = w[r * w_row + t * w_inner];
#pragma GCC unroll 4
      for (int e = 0; e < kRegs; ++e) acc[r][e] += wt * xt[e];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRowBlock; ++r)
#pragma GCC unroll 4
    for (int e = 0; e < kRegs; ++e) reg_at(c + r * width + e * kRegLanes) = acc[r][e];
}

// c[r][:] += Σ_t w[r·w_row + t·w_inner] · x[t][:] for r < rows, t in span(r0) (an InnerSpan) for the
// block of rows [r0, r0 + kRowBlock); rows of c and x are `width` floats (a multiple of 16). Strides
// let the same kernel take a weight tile transposed (Pᵀ·dO, dSᵀ·Q); the span trims causally hidden
// products (CausalTile).
template <typename Span>
void tile_accumulate(float* c, const float* w, int64_t w_row, int64_t w_inner, const float* x,
                     int64_t width, int rows, const Span& span) {
  const int64_t regs = width / kRegLanes;
  for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
    const InnerSpan in = span(r0);
    const float* wb = w + r0 * w_row + in.begin * w_inner;
    const float* xb = x + in.begin * width;
    const int64_t n = in.end - in.begin;
    for (int64_t e0 = 0, block = 0; e0 < regs; e0 += block) {
      float* cb = c + r0 * width + e0 * kRegLanes;
      const float* xe = xb + e0 * kRegLanes;
      switch (block = next_block_regs(regs - e0)) {
        case 4: accumulate_block<4>(cb, wb, w_row, w_inner, xe, width, n); break;
        case 3: accumulate_block<3>(cb, wb, w_row, w_inner, xe, width, n); break;
        case 2: accumulate_block<2>(cb, wb, w_row, w_inner, xe, width, n); break;
        default: accumulate_block<1>(cb, wb, w_row, w_inner, xe, width, n); break;
      }
    }
  }
}

// The spans of the four tile products (in steps of `per` keys or queries: 1 in f32, 2 in bf16 pairs).
auto keys_for_queries(const CausalTile& tile, int64_t inner, int64_t per) {
  return [&tile, inner, per](int64_t r0) { return tile.keys_for_queries(r0, inner, per); };
}
auto queries_for_keys(const CausalTile& tile, int64_t inner, int64_t per) {
  return [&tile, inner, per](int64_t c0) { return tile.queries_for_keys(c0, inner, per); };
}

// Query tile [i0, i0+kQueryTile) sees keys from the start of its first row's document (documents
// are contiguous runs, so no row of the tile starts earlier) up to its last row.
int64_t first_key_tile(const int32_t* doc_start, int64_t b, int64_t T, int64_t i0) {
  return doc_start ? doc_start[b * T + i0] / kKeyTile : 0;
}
int64_t end_key_tile(int64_t T, int64_t i0) {
  return (std::min(i0 + kQueryTile, T) - 1) / kKeyTile + 1;
}

// Whether some query of the tile may not see some key of the tile (else the mask is skipped).
bool tile_needs_mask(const Problem& p, const int32_t* doc_start, int64_t b, int64_t i0, int64_t j0) {
  const int64_t last_row = std::min(i0 + kQueryTile, p.T) - 1;
  return j0 + kKeyTile - 1 > i0 || (doc_start && doc_start[b * p.T + last_row] > j0);
}

// s = -inf where query i0+r may not see key j0+c; rows past T are masked entirely.
void mask_tile(float* s, const Problem& p, int64_t b, int64_t i0, int64_t j0) {
  for (int r = 0; r < kQueryTile; ++r) {
    const int64_t i = i0 + r;
    float* row = s + r * kKeyTile;
    // Causal part: keys past i (and every key of a padding row) are hidden.
    const int64_t last_visible = i < p.T ? std::min<int64_t>(i - j0, kKeyTile - 1) : -1;
    for (int64_t c = std::max<int64_t>(last_visible + 1, 0); c < kKeyTile; ++c) row[c] = -kInf;
    if (!p.doc_ids) continue;
    const int32_t* docs = p.doc_ids + b * p.T;
    for (int64_t c = 0; c <= last_visible; ++c)
      if (docs[j0 + c] != docs[i]) row[c] = -kInf;
  }
}

// dst[t][0:HDp] = src row t of (b, kv head g) for t < T, zero-padded to [Tp][HDp].
void pack_rows_padded(float* dst, const float* src, const Problem& p, int64_t b, int64_t g) {
  const int64_t HDp = padded_head_dim(p.HD);
  std::fill(dst, dst + padded_length(p.T) * HDp, 0.0f);
  for (int64_t t = 0; t < p.T; ++t)
    std::copy_n(src + p.kv_offset(b, t, g), p.HD, dst + t * HDp);
}

// dst[tile][d][c] = src[b, tile·kKeyTile + c, g, d] (zero past T): key tiles transposed, so that
// one d of a tile is a contiguous vector of kKeyTile keys. On AVX2, 8 keys × 8 dims at a time are
// transposed in registers (the scalar scatter was ~5% of `bench attention` at HD = 32 on Zen 3).
void pack_key_tiles_transposed(float* dst, const float* src, const Problem& p, int64_t b,
                               int64_t g) {
  static_assert(kKeyTile % 8 == 0);  // a group of 8 keys never straddles two tiles
  int64_t t = 0;
#ifdef LMT_SIMD_AVX2
  if (p.HD % 8 == 0)
    for (; t + 8 <= p.T; t += 8) {
      float* tile = dst + (t / kKeyTile) * kKeyTile * p.HD + t % kKeyTile;
      for (int64_t d = 0; d < p.HD; d += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + p.kv_offset(b, t + i, g) + d);
        simd::transpose8(r);
        for (int k = 0; k < 8; ++k) _mm256_storeu_ps(tile + (d + k) * kKeyTile, r[k]);
      }
    }
#endif
  for (; t < padded_length(p.T); ++t) {
    float* tile = dst + (t / kKeyTile) * kKeyTile * p.HD + t % kKeyTile;
    const float* row = t < p.T ? src + p.kv_offset(b, t, g) : nullptr;
    for (int64_t d = 0; d < p.HD; ++d) tile[d * kKeyTile] = row ? row[d] : 0.0f;
  }
}

// compute bf16 (cpu_bf16::kAvailable): B pairs of key tiles transposed, dst[tile][k][c] =
// (src[b, tile·kKeyTile + c, g, 2k], ...[2k + 1]) for k < HDp/2, zero past T and HD.
void pack_key_tile_pairs(uint32_t* dst, const float* src, const Problem& p, int64_t b, int64_t g) {
  static_assert(kKeyTile == cpu_bf16::kKeyCols);
  const int64_t H2 = padded_head_dim(p.HD) / 2;
  for (int64_t j0 = 0; j0 < padded_length(p.T); j0 += kKeyTile) {
    const float* rows[kKeyTile];
    for (int c = 0; c < kKeyTile; ++c) rows[c] = j0 + c < p.T ? src + p.kv_offset(b, j0 + c, g) : nullptr;
    cpu_bf16::key_tile_pairs(dst + j0 * H2, rows, p.HD, H2);
  }
}

// compute bf16: B pairs of rows, dst[k][e] = (src[b, 2k, g, e], src[b, 2k + 1, g, e]) for
// k < Tp/2, e < HDp, zero past T and HD.
void pack_row_pairs(uint32_t* dst, const float* src, const Problem& p, int64_t b, int64_t g) {
  const int64_t HDp = padded_head_dim(p.HD);
  for (int64_t k = 0; 2 * k < padded_length(p.T); ++k) {
    for (int64_t t = 2 * k + 8; t < 2 * k + 10 && t < p.T; ++t) simd::prefetch_row(src + p.kv_offset(b, t, g), p.HD);
    const float* r0 = 2 * k < p.T ? src + p.kv_offset(b, 2 * k, g) : nullptr;
    const float* r1 = 2 * k + 1 < p.T ? src + p.kv_offset(b, 2 * k + 1, g) : nullptr;
    if (r0 == nullptr) std::fill(dst + k * HDp, dst + (k + 1) * HDp, 0u);
    else cpu_bf16::interleave_two_rows(dst + k * HDp, r0, r1, p.HD, HDp);
  }
}

// doc_start[b·T + t] = the first position of t's document.
void find_document_starts(const Problem& p, int32_t* doc_start) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t < p.T; ++t) {
      const int64_t i = b * p.T + t;
      doc_start[i] = (t > 0 && p.doc_ids[i] == p.doc_ids[i - 1]) ? doc_start[i - 1] : int32_t(t);
    }
}

// Packs query tile rows i0.. of head h, times `factor`, into dst[kQueryTile][HDp] (zero-padded).
void pack_query_tile(float* dst, const float* src, const Problem& p, int64_t b, int64_t h,
                     int64_t i0, float factor) {
  const int64_t HDp = padded_head_dim(p.HD);
  for (int64_t r = 0; r < kQueryTile; ++r) {
    float* out = dst + r * HDp;
    if (i0 + r >= p.T) {
      std::fill(out, out + HDp, 0.0f);
      continue;
    }
    if (i0 + r + 8 < p.T) simd::prefetch_row(src + p.q_offset(b, i0 + r + 8, h), p.HD);
    const float* row = src + p.q_offset(b, i0 + r, h);
    for (int64_t d = 0; d < p.HD; ++d) out[d] = factor * row[d];
    std::fill(out + p.HD, out + HDp, 0.0f);
  }
}

// ---- kFlash forward -----------------------------------------------------------------------------

struct FlashForwardScratch {
  float* q_tile;   // [kQueryTile][HDp], pre-scaled by `scale`
  float* scores;   // [kQueryTile][kKeyTile], becomes unnormalised probabilities
  float* acc;      // [kQueryTile][HDp], unnormalised output
  float* row_max;  // [kQueryTile] running max of the scores seen so far
  float* row_sum;  // [kQueryTile] running Σ e^(s - row_max)
  uint32_t* q_pairs = nullptr;  // bf16: [kQueryTile][HDp/2] q_tile as A pairs
  uint32_t* p_pairs = nullptr;  // bf16: [kQueryTile][kKeyTile/2] the probabilities as A pairs

  void place(Carver& c, int64_t HDp, bool bf16) {
    q_tile = c.take(kQueryTile * HDp);
    scores = c.take(kQueryTile * kKeyTile);
    acc = c.take(kQueryTile * HDp);
    row_max = c.take(kQueryTile);
    row_sum = c.take(kQueryTile);
    if (bf16) {
      q_pairs = c.take<uint32_t>(kQueryTile * HDp / 2);
      p_pairs = c.take<uint32_t>(kQueryTile * kKeyTile / 2);
    }
  }
};

// The keys and values of one (b, kv head): f32 (key_tiles_t, values) or, with compute bf16, bf16
// pairs (key_pairs: pack_key_tile_pairs, value_pairs: pack_row_pairs).
struct KeyValues {
  const float* key_tiles_t = nullptr;     // [Tp/kKeyTile][HD][kKeyTile]
  const float* values = nullptr;          // [Tp][HDp]
  const uint32_t* key_pairs = nullptr;    // [Tp/kKeyTile][HDp/2][kKeyTile]
  const uint32_t* value_pairs = nullptr;  // [Tp/2][HDp]
};

// row[0:kKeyTile] = e^(row − base) over its first kRegs registers, 0 past them (keys hidden from the
// row); returns their sum.
template <int kRegs>
[[gnu::always_inline]] inline float exp_row_prefix(float* row, float base) {
  f32reg sum{};
#pragma GCC unroll 8
  for (int c = 0; c < kRegs; ++c) {
    f32reg& sv = reg_at(row + c * kRegLanes);
    sv = vexp(sv - base);
    sum += sv;
  }
  for (int c = kRegs; c < kKeyRegs; ++c) reg_at(row + c * kRegLanes) = f32reg{};
  return horizontal_sum(sum);
}

// Online softmax over one tile of scores: s becomes e^(s - new running max), the running sum is
// rescaled and extended, and acc rows are rescaled to the new max. Vectors of keys that the tile
// hides from a row wholly (causal; their scores are -inf) become 0 without an exp. Works on
// registers (f32reg), not f32x16: on AVX2 GCC moved each f32x16 value through the stack.
void online_softmax_tile(float* s, FlashForwardScratch& w, int64_t HDp, const CausalTile& tile) {
  static_assert(kKeyVecs == 4);
  for (int r = 0; r < kQueryTile; ++r) {
    float* row = s + r * kKeyTile;
    f32reg m = reg_at(row);  // hidden keys are masked (-inf) and change no max
    for (int c = 1; c < kKeyRegs; ++c) m = m > reg_at(row + c * kRegLanes) ? m : reg_at(row + c * kRegLanes);
    const float old_max = w.row_max[r], new_max = std::max(old_max, horizontal_max(m));
    const float base = new_max == -kInf ? 0.0f : new_max;  // a row masked so far stays all-zero
    float sum;
    switch (tile.key_vecs(r, kKeyVecs, kLanes)) {
      case 4: sum = exp_row_prefix<4 * kRegsPerVec>(row, base); break;
      case 3: sum = exp_row_prefix<3 * kRegsPerVec>(row, base); break;
      case 2: sum = exp_row_prefix<2 * kRegsPerVec>(row, base); break;
      default: sum = exp_row_prefix<1 * kRegsPerVec>(row, base); break;
    }
    const float rescale = old_max == new_max ? 1.0f : std::exp(old_max - new_max);
    w.row_sum[r] = w.row_sum[r] * rescale + sum;
    w.row_max[r] = new_max;
    if (rescale != 1.0f)
      for (int64_t d = 0; d < HDp; d += kRegLanes) reg_at(w.acc + r * HDp + d) *= rescale;
  }
}

// One (batch, head, query tile): out rows and lse.
void flash_forward_tile(const Problem& p, const KeyValues& kv, const int32_t* doc_start, float* out, float* lse,
                        int64_t b, int64_t h, int64_t i0, FlashForwardScratch& w) {
  const int64_t HD = p.HD, HDp = padded_head_dim(HD), H2 = HDp / 2;
  const bool bf16 = kv.key_pairs != nullptr;
  pack_query_tile(w.q_tile, p.q, p, b, h, i0, p.scale);
  if (bf16) cpu_bf16::to_bf16_rows(w.q_pairs, w.q_tile, kQueryTile, static_cast<int>(HDp));
  std::fill(w.acc, w.acc + kQueryTile * HDp, 0.0f);
  std::fill(w.row_max, w.row_max + kQueryTile, -kInf);
  std::fill(w.row_sum, w.row_sum + kQueryTile, 0.0f);
  for (int64_t kt = first_key_tile(doc_start, b, p.T, i0); kt < end_key_tile(p.T, i0); ++kt) {
    const int64_t j0 = kt * kKeyTile;
    const CausalTile tile{i0 - j0};
    if (bf16) cpu_bf16::tile_scores(w.scores, w.q_pairs, H2, kv.key_pairs + j0 * H2, H2, kQueryTile, tile);
    else tile_scores(w.scores, w.q_tile, HDp, kv.key_tiles_t + j0 * HD, HD, kQueryTile, tile);
    if (tile_needs_mask(p, doc_start, b, i0, j0)) mask_tile(w.scores, p, b, i0, j0);
    online_softmax_tile(w.scores, w, HDp, tile);
    if (bf16) {
      cpu_bf16::to_bf16_rows(w.p_pairs, w.scores, kQueryTile, kKeyTile);
      cpu_bf16::tile_accumulate(w.acc, w.p_pairs, kKeyTile / 2, 1, kv.value_pairs + j0 / 2 * HDp, HDp, kQueryTile,
                                keys_for_queries(tile, kKeyTile / 2, 2));
    } else {
      tile_accumulate(w.acc, w.scores, kKeyTile, 1, kv.values + j0 * HDp, HDp, kQueryTile,
                      keys_for_queries(tile, kKeyTile, 1));
    }
  }
  for (int64_t r = 0; r < kQueryTile && i0 + r < p.T; ++r) {
    const float inv_sum = 1.0f / w.row_sum[r];  // > 0: every query sees itself
    float* o = out + p.q_offset(b, i0 + r, h);
    for (int64_t d = 0; d < HD; ++d) o[d] = w.acc[r * HDp + d] * inv_sum;
    lse[(b * p.NH + h) * p.T + i0 + r] = w.row_max[r] + std::log(w.row_sum[r]);
  }
}

// ---- kFlash backward ----------------------------------------------------------------------------

struct FlashBackwardScratch {
  float* q_tile;    // [kQueryTile][HDp], pre-scaled by `scale` (so dK needs no final scaling)
  float* do_tile;   // [kQueryTile][HDp]
  float* dq_tile;   // [kQueryTile][HDp], Σ dS·K (scaled on write-out)
  float* lse_tile;  // [kQueryTile], +inf past T so those rows get probability 0
  float* d_tile;    // [kQueryTile] D_i = rowsum(dO_i ∘ O_i)
  float* probs;     // [kQueryTile][kKeyTile] scores, then P
  float* dprobs;    // [kQueryTile][kKeyTile] dP, then dS
  float* dk_acc;    // [Tp][HDp] this kv head's dK over all query heads of its group
  float* dv_acc;    // [Tp][HDp]
  // f32 operands of this (b, g):
  float* key_tiles_t = nullptr;    // [Tp/kKeyTile][HD][kKeyTile] K, see pack_key_tiles_transposed
  float* value_tiles_t = nullptr;  // [Tp/kKeyTile][HD][kKeyTile] V likewise, for dP = dO·Vᵀ
  float* key_rows = nullptr;       // [Tp][HDp] K padded, for dQ = dS·K
  // compute bf16 instead (cpu_bf16 pairs):
  uint32_t* key_pairs = nullptr;      // [Tp/kKeyTile][HDp/2][kKeyTile] for S = Q·Kᵀ
  uint32_t* value_pairs = nullptr;    // [Tp/kKeyTile][HDp/2][kKeyTile] for dP = dO·Vᵀ
  uint32_t* key_row_pairs = nullptr;  // [Tp/2][HDp] for dQ = dS·K
  uint32_t* q_a = nullptr;            // [kQueryTile][HDp/2] q_tile as A pairs (S)
  uint32_t* do_a = nullptr;           // [kQueryTile][HDp/2] do_tile as A pairs (dP)
  uint32_t* q_b = nullptr;            // [kQueryTile/2][HDp] q_tile as B pairs (dK)
  uint32_t* do_b = nullptr;           // [kQueryTile/2][HDp] do_tile as B pairs (dV)
  uint32_t* pairs = nullptr;          // [kQueryTile·kKeyTile/2] P or dS as A pairs, in turn

  void place(Carver& c, int64_t Tp, int64_t HD, bool bf16) {
    const int64_t HDp = padded_head_dim(HD);
    q_tile = c.take(kQueryTile * HDp);
    do_tile = c.take(kQueryTile * HDp);
    dq_tile = c.take(kQueryTile * HDp);
    lse_tile = c.take(kQueryTile);
    d_tile = c.take(kQueryTile);
    probs = c.take(kQueryTile * kKeyTile);
    dprobs = c.take(kQueryTile * kKeyTile);
    dk_acc = c.take(Tp * HDp);
    dv_acc = c.take(Tp * HDp);
    if (!bf16) {
      key_tiles_t = c.take(Tp * HD);
      value_tiles_t = c.take(Tp * HD);
      key_rows = c.take(Tp * HDp);
      return;
    }
    key_pairs = c.take<uint32_t>(Tp * HDp / 2);
    value_pairs = c.take<uint32_t>(Tp * HDp / 2);
    key_row_pairs = c.take<uint32_t>(Tp / 2 * HDp);
    q_a = c.take<uint32_t>(kQueryTile * HDp / 2);
    do_a = c.take<uint32_t>(kQueryTile * HDp / 2);
    q_b = c.take<uint32_t>(kQueryTile / 2 * HDp);
    do_b = c.take<uint32_t>(kQueryTile / 2 * HDp);
    pairs = c.take<uint32_t>(kQueryTile * kKeyTile / 2);
  }
  bool bf16() const { return key_pairs != nullptr; }
};

// Loads the per-row inputs of query tile i0 of head h.
void load_backward_query_tile(const Problem& p, const float* dout, const float* out,
                              const float* lse, int64_t b, int64_t h, int64_t i0,
                              FlashBackwardScratch& w) {
  pack_query_tile(w.q_tile, p.q, p, b, h, i0, p.scale);
  pack_query_tile(w.do_tile, dout, p, b, h, i0, 1.0f);
  std::fill(w.dq_tile, w.dq_tile + kQueryTile * padded_head_dim(p.HD), 0.0f);
  for (int64_t r = 0; r < kQueryTile; ++r) {
    const int64_t i = i0 + r;
    if (i + 8 < p.T) simd::prefetch_row(out + p.q_offset(b, i + 8, h), p.HD);
    w.lse_tile[r] = i < p.T ? lse[(b * p.NH + h) * p.T + i] : kInf;
    w.d_tile[r] = i < p.T ? dot(dout + p.q_offset(b, i, h), out + p.q_offset(b, i, h), p.HD) : 0.0f;
  }
  if (w.bf16()) {
    const int HDp = static_cast<int>(padded_head_dim(p.HD));
    cpu_bf16::to_bf16_rows(w.q_a, w.q_tile, kQueryTile, HDp);
    cpu_bf16::to_bf16_rows(w.do_a, w.do_tile, kQueryTile, HDp);
    cpu_bf16::interleave_rows(w.q_b, w.q_tile, kQueryTile, HDp);
    cpu_bf16::interleave_rows(w.do_b, w.do_tile, kQueryTile, HDp);
  }
}

// P = e^(S - lse) (masked scores are -inf, so 0) and dS = P ∘ (dP - D), in place; both 0 without an
// exp for vectors of keys that the tile hides from the row (causal).
template <int kRegs>
[[gnu::always_inline]] inline void probabilities_and_score_grads_row(float* probs, float* dprobs, float lse, float d) {
#pragma GCC unroll 8
  for (int c = 0; c < kRegs * kRegLanes; c += kRegLanes) {
    f32reg& pv = reg_at(probs + c);
    f32reg& dv = reg_at(dprobs + c);
    pv = vexp(pv - lse);
    dv = pv * (dv - d);
  }
  for (int c = kRegs * kRegLanes; c < kKeyTile; c += kRegLanes) reg_at(probs + c) = reg_at(dprobs + c) = f32reg{};
}
[[gnu::always_inline]] inline void probabilities_and_score_grads(FlashBackwardScratch& w, const CausalTile& tile) {
  for (int r = 0; r < kQueryTile; ++r) {
    float *probs = w.probs + r * kKeyTile, *dprobs = w.dprobs + r * kKeyTile;
    const float lse = w.lse_tile[r], d = w.d_tile[r];
    switch (tile.key_vecs(r, kKeyVecs, kLanes)) {
      case 4: probabilities_and_score_grads_row<4 * kRegsPerVec>(probs, dprobs, lse, d); break;
      case 3: probabilities_and_score_grads_row<3 * kRegsPerVec>(probs, dprobs, lse, d); break;
      case 2: probabilities_and_score_grads_row<2 * kRegsPerVec>(probs, dprobs, lse, d); break;
      default: probabilities_and_score_grads_row<1 * kRegsPerVec>(probs, dprobs, lse, d); break;
    }
  }
}

// flash_backward_tile's step for key tile j0 with bf16 pairs (the f32 step's products, in order).
void flash_backward_tile_bf16(const Problem& p, const int32_t* doc_start, int64_t b, int64_t i0, int64_t j0,
                              FlashBackwardScratch& w) {
  const int64_t HDp = padded_head_dim(p.HD), H2 = HDp / 2;
  const CausalTile tile{i0 - j0};
  cpu_bf16::tile_scores(w.probs, w.q_a, H2, w.key_pairs + j0 * H2, H2, kQueryTile, tile);
  if (tile_needs_mask(p, doc_start, b, i0, j0)) mask_tile(w.probs, p, b, i0, j0);
  cpu_bf16::tile_scores(w.dprobs, w.do_a, H2, w.value_pairs + j0 * H2, H2, kQueryTile, tile);
  probabilities_and_score_grads(w, tile);
  // dV_j += Pᵀ·dO_i and dK_j += dSᵀ·(scale·Q_i): P and dS interleaved by query pairs, read transposed.
  cpu_bf16::interleave_rows(w.pairs, w.probs, kQueryTile, kKeyTile);
  cpu_bf16::tile_accumulate(w.dv_acc + j0 * HDp, w.pairs, 1, kKeyTile, w.do_b, HDp, kKeyTile,
                            queries_for_keys(tile, kQueryTile / 2, 2));
  cpu_bf16::interleave_rows(w.pairs, w.dprobs, kQueryTile, kKeyTile);
  cpu_bf16::tile_accumulate(w.dk_acc + j0 * HDp, w.pairs, 1, kKeyTile, w.q_b, HDp, kKeyTile,
                            queries_for_keys(tile, kQueryTile / 2, 2));
  // dQ_i += dS·K_j
  cpu_bf16::to_bf16_rows(w.pairs, w.dprobs, kQueryTile, kKeyTile);
  cpu_bf16::tile_accumulate(w.dq_tile, w.pairs, kKeyTile / 2, 1, w.key_row_pairs + j0 / 2 * HDp, HDp, kQueryTile,
                            keys_for_queries(tile, kKeyTile / 2, 2));
}

// One (batch, head, query tile): dq rows, and this tile's share of dk_acc / dv_acc.
void flash_backward_tile(const Problem& p, const int32_t* doc_start, float* dq, int64_t b,
                         int64_t h, int64_t i0, FlashBackwardScratch& w) {
  const int64_t HD = p.HD, HDp = padded_head_dim(HD);
  for (int64_t kt = first_key_tile(doc_start, b, p.T, i0); kt < end_key_tile(p.T, i0); ++kt) {
    const int64_t j0 = kt * kKeyTile;
    if (w.bf16()) {
      flash_backward_tile_bf16(p, doc_start, b, i0, j0, w);
      continue;
    }
    const CausalTile tile{i0 - j0};
    tile_scores(w.probs, w.q_tile, HDp, w.key_tiles_t + j0 * HD, HD, kQueryTile, tile);
    if (tile_needs_mask(p, doc_start, b, i0, j0)) mask_tile(w.probs, p, b, i0, j0);
    tile_scores(w.dprobs, w.do_tile, HDp, w.value_tiles_t + j0 * HD, HD, kQueryTile, tile);
    probabilities_and_score_grads(w, tile);
    // dV_j += Pᵀ·dO_i, dK_j += dSᵀ·(scale·Q_i), dQ_i += dS·K_j
    tile_accumulate(w.dv_acc + j0 * HDp, w.probs, 1, kKeyTile, w.do_tile, HDp, kKeyTile,
                    queries_for_keys(tile, kQueryTile, 1));
    tile_accumulate(w.dk_acc + j0 * HDp, w.dprobs, 1, kKeyTile, w.q_tile, HDp, kKeyTile,
                    queries_for_keys(tile, kQueryTile, 1));
    tile_accumulate(w.dq_tile, w.dprobs, kKeyTile, 1, w.key_rows + j0 * HDp, HDp, kQueryTile,
                    keys_for_queries(tile, kKeyTile, 1));
  }
  for (int64_t r = 0; r < kQueryTile && i0 + r < p.T; ++r) {
    float* dst = dq + p.q_offset(b, i0 + r, h);
    for (int64_t d = 0; d < HD; ++d) dst[d] = p.scale * w.dq_tile[r * HDp + d];
  }
}

// Copies the first HD floats of each padded accumulator row into (b, kv head g) of dst.
void store_kv_grad(float* dst, const float* acc, const Problem& p, int64_t b, int64_t g) {
  const int64_t HDp = padded_head_dim(p.HD);
  for (int64_t t = 0; t < p.T; ++t) std::copy_n(acc + t * HDp, p.HD, dst + p.kv_offset(b, t, g));
}

}  // namespace

// ---- entry points -------------------------------------------------------------------------------

void CpuBackend::attention_forward_impl(AttentionBackend backend, const TensorView& out,
                                        const TensorView& lse, const TensorView& q,
                                        const TensorView& k, const TensorView& v,
                                        const TensorView& doc_ids, float scale, DType compute) {
  for (const TensorView* t : {&out, &lse, &q, &k, &v}) cpu_require_f32("attention_forward", *t);
  const Problem p = make_problem(q, k, v, doc_ids, scale);
  float* out_data = out.as<float>();
  float* lse_data = lse.as<float>();
  const int threads = omp_get_max_threads();

  if (backend == AttentionBackend::kNaive) {
    const int64_t per_thread = p.T * p.T;
    float* probs = static_cast<float*>(workspace(threads * per_thread * sizeof(float)));
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < p.B * p.NH; ++bh)
      naive_forward_head(p, out_data, lse_data, bh / p.NH, bh % p.NH,
                         probs + omp_get_thread_num() * per_thread);
    return;
  }

  const int64_t HDp = padded_head_dim(p.HD), Tp = padded_length(p.T), BG = p.B * p.G;
  const bool bf16 = compute == DType::kBF16 && cpu_bf16::kAvailable && native_bf16_gemms();
  Carver per_thread(nullptr);
  FlashForwardScratch{}.place(per_thread, HDp, bf16);
  float *key_tiles_t = nullptr, *values = nullptr;
  uint32_t *key_pairs = nullptr, *value_pairs = nullptr;
  int32_t* doc_start;
  char* thread_scratch;
  auto layout = [&](Carver& c) {
    if (bf16) {
      key_pairs = c.take<uint32_t>(BG * Tp * HDp / 2);
      value_pairs = c.take<uint32_t>(BG * Tp / 2 * HDp);
    } else {
      key_tiles_t = c.take(BG * Tp * p.HD);
      values = c.take(BG * Tp * HDp);
    }
    doc_start = p.doc_ids ? c.take<int32_t>(p.B * p.T) : nullptr;
    thread_scratch = c.take<char>(threads * per_thread.used());
  };
  Carver measure(nullptr);
  layout(measure);
  Carver carver(workspace(measure.used()));
  layout(carver);
  if (doc_start) find_document_starts(p, doc_start);

#pragma omp parallel for schedule(static)
  for (int64_t bg = 0; bg < BG; ++bg) {
    if (bf16) {
      pack_key_tile_pairs(key_pairs + bg * Tp * HDp / 2, p.k, p, bg / p.G, bg % p.G);
      pack_row_pairs(value_pairs + bg * Tp / 2 * HDp, p.v, p, bg / p.G, bg % p.G);
    } else {
      pack_key_tiles_transposed(key_tiles_t + bg * Tp * p.HD, p.k, p, bg / p.G, bg % p.G);
      pack_rows_padded(values + bg * Tp * HDp, p.v, p, bg / p.G, bg % p.G);
    }
  }
  // Items ordered by query tile, last (most keys) first, so the dynamic schedule ends balanced.
  const int64_t query_tiles = (p.T + kQueryTile - 1) / kQueryTile, heads = p.B * p.NH;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < query_tiles * heads; ++item) {
    Carver mine(thread_scratch + omp_get_thread_num() * per_thread.used());
    FlashForwardScratch w;
    w.place(mine, HDp, bf16);
    const int64_t qt = query_tiles - 1 - item / heads, b = item % heads / p.NH, h = item % p.NH;
    const int64_t bg = b * p.G + h / p.heads_per_group();
    KeyValues kv;
    if (bf16) {
      kv.key_pairs = key_pairs + bg * Tp * HDp / 2;
      kv.value_pairs = value_pairs + bg * Tp / 2 * HDp;
    } else {
      kv.key_tiles_t = key_tiles_t + bg * Tp * p.HD;
      kv.values = values + bg * Tp * HDp;
    }
    flash_forward_tile(p, kv, doc_start, out_data, lse_data, b, h, qt * kQueryTile, w);
  }
}

void CpuBackend::attention_backward_impl(AttentionBackend backend, const TensorView& dq,
                                         const TensorView& dk, const TensorView& dv,
                                         const TensorView& dout, const TensorView& q,
                                         const TensorView& k, const TensorView& v,
                                         const TensorView& out, const TensorView& lse,
                                         const TensorView& doc_ids, float scale, DType compute) {
  for (const TensorView* t : {&dq, &dk, &dv, &dout, &q, &k, &v, &out, &lse})
    cpu_require_f32("attention_backward", *t);
  const Problem p = make_problem(q, k, v, doc_ids, scale);
  const float* dout_data = dout.as<float>();
  const float* out_data = out.as<float>();
  const float* lse_data = lse.as<float>();
  float* dq_data = dq.as<float>();
  float* dk_data = dk.as<float>();
  float* dv_data = dv.as<float>();
  const int threads = omp_get_max_threads();
  const int64_t BG = p.B * p.G, group = p.heads_per_group();

  if (backend == AttentionBackend::kNaive) {
    const int64_t per_thread = p.T * p.T + round_up(p.HD, kLanes);
    float* scratch = static_cast<float*>(workspace(threads * per_thread * sizeof(float)));
#pragma omp parallel for schedule(static)
    for (int64_t bg = 0; bg < BG; ++bg) {
      const int64_t b = bg / p.G, g = bg % p.G;
      float* probs = scratch + omp_get_thread_num() * per_thread;
      for (int64_t t = 0; t < p.T; ++t) {
        std::fill_n(dk_data + p.kv_offset(b, t, g), p.HD, 0.0f);
        std::fill_n(dv_data + p.kv_offset(b, t, g), p.HD, 0.0f);
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        naive_backward_head(p, dout_data, out_data, lse_data, dq_data, dk_data, dv_data, b, h,
                            probs, probs + p.T * p.T);
    }
    return;
  }

  const int64_t Tp = padded_length(p.T);
  const bool bf16 = compute == DType::kBF16 && cpu_bf16::kAvailable && native_bf16_gemms();
  Carver per_thread(nullptr);
  FlashBackwardScratch{}.place(per_thread, Tp, p.HD, bf16);
  int32_t* doc_start;
  char* thread_scratch;
  auto layout = [&](Carver& c) {
    doc_start = p.doc_ids ? c.take<int32_t>(p.B * p.T) : nullptr;
    thread_scratch = c.take<char>(threads * per_thread.used());
  };
  Carver measure(nullptr);
  layout(measure);
  Carver carver(workspace(measure.used()));
  layout(carver);
  if (doc_start) find_document_starts(p, doc_start);

  // One (b, g) per item: the owner packs its K/V, runs every query head of the group over every
  // query tile, and alone accumulates dK/dV of that kv head.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bg = 0; bg < BG; ++bg) {
    const int64_t b = bg / p.G, g = bg % p.G;
    Carver mine(thread_scratch + omp_get_thread_num() * per_thread.used());
    FlashBackwardScratch w;
    w.place(mine, Tp, p.HD, bf16);
    if (bf16) {
      pack_key_tile_pairs(w.key_pairs, p.k, p, b, g);
      pack_key_tile_pairs(w.value_pairs, p.v, p, b, g);
      pack_row_pairs(w.key_row_pairs, p.k, p, b, g);
    } else {
      pack_key_tiles_transposed(w.key_tiles_t, p.k, p, b, g);
      pack_key_tiles_transposed(w.value_tiles_t, p.v, p, b, g);
      pack_rows_padded(w.key_rows, p.k, p, b, g);
    }
    std::fill(w.dk_acc, w.dk_acc + Tp * padded_head_dim(p.HD), 0.0f);
    std::fill(w.dv_acc, w.dv_acc + Tp * padded_head_dim(p.HD), 0.0f);
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      for (int64_t i0 = 0; i0 < p.T; i0 += kQueryTile) {
        load_backward_query_tile(p, dout_data, out_data, lse_data, b, h, i0, w);
        flash_backward_tile(p, doc_start, dq_data, b, h, i0, w);
      }
    store_kv_grad(dk_data, w.dk_acc, p, b, g);
    store_kv_grad(dv_data, w.dv_acc, p, b, g);
  }
}

}  // namespace lmt::kernels
