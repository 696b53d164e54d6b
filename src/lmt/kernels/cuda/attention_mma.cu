// Flash attention on bf16 tensor cores (FlashAttention-2 algorithm): what attention.cu runs for
// compute bf16 with HD <= 128 on sm_80 or newer (kernels/backend.h, attention_forward's `compute`).
//
// Precision: q, k, v, dout are rounded to bf16 as they are loaded into shared memory, and so are the
// probabilities P (and dS in backward) before they multiply V (dO, Q, K); every product accumulates
// in f32, and the softmax statistics (running max, row sums, lse), the mask and D = rowsum(dO ∘ O)
// stay f32. The tensors in global memory stay f32 (the contract of attention_forward).
//
// Structure: the tiles and the per-element work are those of attention.cu's f32 kernels (256
// threads as a 16×16 grid (ty, tx); a thread owns rows ty + 16r and columns tx + 16c of a score
// tile, so a row's reductions are 4 xor-shuffles within a half-warp). Only the products change: the
// 8 warps compute them with WMMA 16×16×16 bf16 fragments from bf16 tiles in shared memory, and store
// the f32 results to shared memory, where the threads pick them up in their (ty, tx) layout.
//   forward: per (b, h, 64-query tile), for each visible 64-key tile: S = Q·Kᵀ (WMMA) → mask, online
//            softmax, P (bf16) → P·V (WMMA, a fresh product per tile) → o = o·α + P·V in registers.
//   dK/dV:   per (b, g, 64-key tile), for each head of the group and visible 64-query tile:
//            Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (WMMA) → Pᵀ, dSᵀ (bf16) → dV += Pᵀ·dO, dK += dSᵀ·Q, both held in
//            WMMA accumulator fragments across the loop.
//   dQ:      per (b, h, 64-query tile), for each visible 64-key tile: S and dP (WMMA) → dS (bf16) →
//            dQ += dS·K in accumulator fragments.
// Deterministic: fixed loop orders, no atomics.
//
// Tiles: 64 query rows × 64 keys for every head-dim bucket (32, 64, 128: HDP, the head dim padded
// with zero columns to its bucket, a multiple of 16 for the fragments). Shared memory: at most about
// 130 KB (dK/dV at HDP 128), within sm_80's 163 KB and sm_90's 227 KB.
#include <cuda_bf16.h>
#include <mma.h>

#include "lmt/kernels/cuda/attention_common.cuh"

namespace lmt::kernels::cuda::attention_detail {
namespace {

namespace wmma = nvcuda::wmma;
using bf16_t = __nv_bfloat16;
using cuda_math::OnlineSoftmax;

constexpr int kThreads = 256;  // 8 warps; 16 × 16 for the per-element work
constexpr int kTile = 64;      // query rows and keys per tile
constexpr int kR = kTile / 16; // rows (or columns) of a tile per thread

// Row strides in elements. bf16 tiles: + 8 (16 bytes) so the fragments' rows fall in different banks;
// f32 tiles the threads read in rows: ≡ 16 (mod 32) so the two half-warps (rows ty, ty + 1) read
// disjoint banks. All are multiples of 8 (bf16) or 4 (f32), as WMMA's loads and stores require, and
// every buffer starts at a multiple of 128 bytes (the fragments' pointers must be 32-byte aligned).
template <int HDP>
struct Layout {
  static constexpr int ldh = HDP + 8;    // bf16 [rows][HDP] tiles of q, k, v, dout
  static constexpr int ldp = kTile + 8;  // bf16 [64][64] tiles of P or dS
  static constexpr int lds = kTile + 16; // f32 [64][64] products (S, dP)
  static constexpr int ldo = HDP + 16;   // f32 [64][HDP] products (P·V, and the final dQ, dK, dV)
  static constexpr int tile_h = kTile * ldh * 2;  // bytes
  static constexpr int tile_p = kTile * ldp * 2;
  static constexpr int tile_s = kTile * lds * 4;
  static constexpr int tile_o = kTile * ldo * 4;
  static constexpr int ints = kTile * 4;
  static constexpr int s_or_o = tile_s > tile_o ? tile_s : tile_o;  // forward: S, then P·V
  static constexpr int larger(int a, int b) { return a > b ? a : b; }
  // forward: Q, K, V | P | S then P·V (one region: P·V is written after S is read) | key doc ids
  static constexpr int forward = 3 * tile_h + tile_p + s_or_o + ints;
  // dK/dV: K, V, Q, dO | Sᵀ, dPᵀ | Pᵀ, dSᵀ | lse, D, query doc ids; at the end dK, dV (f32) from 0
  static constexpr int dkv = larger(4 * tile_h + 2 * tile_s + 2 * tile_p + 3 * ints, 2 * tile_o);
  // dQ: Q, dO, K, V | S, dP | dS | key doc ids; at the end dQ (f32) from 0
  static constexpr int dq = larger(4 * tile_h + 2 * tile_s + tile_p + ints, tile_o);
};

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::row_major>;  // B(k,n) = p[k·ld + n]
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::col_major>;  // B(k,n) = p[n·ld + k]
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Copies `rows` rows of HD floats (global row stride `stride`) into a bf16 tile [rows][ldh] whose
// columns [HD, HDP) and rows >= valid are zero (padding meets P = 0 and must be finite).
template <int HDP>
__device__ __forceinline__ void load_rows_bf16(bf16_t* dst, const float* src, int64_t stride, int valid, int HD) {
  constexpr int ldh = Layout<HDP>::ldh;
  if ((HD & 3) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {  // stride is a multiple of HD
    constexpr int quads = HDP / 4;
    for (int idx = threadIdx.x; idx < kTile * quads; idx += blockDim.x) {
      const int r = idx / quads, e = (idx - r * quads) * 4;
      const float4 x = r < valid && e < HD ? *reinterpret_cast<const float4*>(src + r * stride + e)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
      __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(dst + r * ldh + e);
      p[0] = __floats2bfloat162_rn(x.x, x.y);
      p[1] = __floats2bfloat162_rn(x.z, x.w);
    }
  } else {
    for (int idx = threadIdx.x; idx < kTile * HDP; idx += blockDim.x) {
      const int r = idx / HDP, e = idx - r * HDP;
      dst[r * ldh + e] = __float2bfloat16_rn(r < valid && e < HD ? src[r * stride + e] : 0.0f);
    }
  }
}

// c[u] (+)= A·B over the 64-wide inner dimension or over HDP: the warp's 16-row stripe `tm` of A
// times the column tiles tn0 + u of B. `a` points at A's stripe, `b` at B's first column tile; the
// step between inner 16-blocks is `a_step` and `b_step` elements, between column tiles `b_col`.
template <typename FragB, int U>
__device__ __forceinline__ void mma_stripe(FragC (&c)[U], const bf16_t* a, int lda, int a_step, const bf16_t* b,
                                           int ldb, int b_step, int b_col, int ksteps) {
  for (int kk = 0; kk < ksteps; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + kk * a_step, lda);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      FragB fb;
      wmma::load_matrix_sync(fb, b + kk * b_step + u * b_col, ldb);
      wmma::mma_sync(c[u], fa, fb, c[u]);
    }
  }
}

template <int U>
__device__ __forceinline__ void zero(FragC (&c)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) wmma::fill_fragment(c[u], 0.0f);
}

// out[64][64] (f32, ld lds) = X·Yᵀ for bf16 tiles X, Y [64][HDP] (ld ldh): 16 output tiles, two
// per warp (warp w: row stripe w / 2, column tiles 2·(w % 2) + {0, 1}).
template <int HDP>
__device__ __forceinline__ void product_xyt(float* out, const bf16_t* X, const bf16_t* Y) {
  using L = Layout<HDP>;
  const int warp = threadIdx.x / 32, tm = warp / 2, tn0 = (warp % 2) * 2;
  FragC c[2];
  zero(c);
  mma_stripe<FragBCol>(c, X + tm * 16 * L::ldh, L::ldh, 16, Y + tn0 * 16 * L::ldh, L::ldh, 16, 16 * L::ldh,
                       HDP / 16);
#pragma unroll
  for (int u = 0; u < 2; ++u)
    wmma::store_matrix_sync(out + tm * 16 * L::lds + (tn0 + u) * 16, c[u], L::lds, wmma::mem_row_major);
}

// The accumulators of a [64][HDP] product P·M (P [64][64] bf16, ld ldp; M [64][HDP] bf16, ld ldh):
// warp w owns row stripe w / 2 and column tiles (w % 2)·U + u, U = HDP / 32.
template <int HDP>
struct StripeAcc {
  static constexpr int U = HDP / 32;
  FragC c[U];
  __device__ __forceinline__ void clear() { zero(c); }
  __device__ __forceinline__ static int tm() { return threadIdx.x / 32 / 2; }
  __device__ __forceinline__ static int tn0() { return (threadIdx.x / 32 % 2) * U; }
  __device__ __forceinline__ void add(const bf16_t* P, const bf16_t* M) {
    using L = Layout<HDP>;
    mma_stripe<FragBRow>(c, P + tm() * 16 * L::ldp, L::ldp, 16, M + tn0() * 16, L::ldh, 16 * L::ldh, 16,
                         kTile / 16);
  }
  __device__ __forceinline__ void store(float* out) const {
    using L = Layout<HDP>;
#pragma unroll
    for (int u = 0; u < U; ++u)
      wmma::store_matrix_sync(out + tm() * 16 * L::ldo + (tn0() + u) * 16, c[u], L::ldo, wmma::mem_row_major);
  }
};

// Writes rows [r0, r0 + 64) ∩ [0, T) of a [64][HDP] f32 tile (ld ldo) times `mul` to rows of HD
// floats at dst(row) (the thread layout: rows ty + 16r, columns tx + 16e).
template <int HDP, typename RowPtr>
__device__ __forceinline__ void write_rows(const float* tile, int valid, int HD, float mul, RowPtr dst) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int row = ty + 16 * r;
    if (row >= valid) continue;
    float* out = dst(row);
#pragma unroll
    for (int e = 0; e < HDP / 16; ++e) {
      const int col = tx + 16 * e;
      if (col < HD) out[col] = tile[row * Layout<HDP>::ldo + col] * mul;
    }
  }
}

// ---- forward ----------------------------------------------------------------------------------

template <int HDP>
__global__ void __launch_bounds__(kThreads) mma_forward_kernel(ForwardArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L = Layout<HDP>;
  constexpr int E = HDP / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_edge;
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem);
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem + L::tile_h);
  bf16_t* Vs = reinterpret_cast<bf16_t*>(smem + 2 * L::tile_h);
  bf16_t* Ps = reinterpret_cast<bf16_t*>(smem + 3 * L::tile_h);
  float* Ss = reinterpret_cast<float*>(smem + 3 * L::tile_h + L::tile_p);  // S, then P·V
  int32_t* kdoc = reinterpret_cast<int32_t*>(smem + 3 * L::tile_h + L::tile_p + L::s_or_o);

  const Dims& d = a.d;
  const QueryTile t = query_tile(d, a.docs, kTile);
  const int b = t.b, h = t.h, q0 = t.q0, q_valid = t.q_valid, HD = d.HD;
  const int32_t* docs = t.docs;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_rows_bf16<HDP>(Qs, a.q + d.q_index(b, q0, h), int64_t(d.NH) * HD, q_valid, HD);
  int32_t qdoc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int i = q0 + ty + 16 * r;
    qdoc[r] = docs && i < d.T ? docs[i] : 0;
  }
  const int first_key = docs ? doc_run_edge(docs, d.T, q0, -1, &s_edge) : 0;
  const int last_key = q0 + q_valid - 1;

  OnlineSoftmax st[kR];
  float o[kR][E];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int e = 0; e < E; ++e) o[r][e] = 0.0f;

  for (int kt = first_key / kTile; kt <= last_key / kTile; ++kt) {
    const int k0 = kt * kTile, k_valid = min(kTile, d.T - k0);
    __syncthreads();  // the previous tile's K, V, P and P·V are no longer read
    load_rows_bf16<HDP>(Ks, a.k + d.kv_index(b, k0, t.g), int64_t(d.G) * HD, k_valid, HD);
    load_rows_bf16<HDP>(Vs, a.v + d.kv_index(b, k0, t.g), int64_t(d.G) * HD, k_valid, HD);
    if (docs)
      for (int j = threadIdx.x; j < kTile; j += blockDim.x) kdoc[j] = j < k_valid ? docs[k0 + j] : 0;
    __syncthreads();

    product_xyt<HDP>(Ss, Qs, Ks);  // S = Q·Kᵀ
    __syncthreads();

    float alpha[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int row = ty + 16 * r, i = q0 + row;
      float s[kR];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < kR; ++c) {
        const int jj = tx + 16 * c;
        const bool vis = cuda_math::attention_visible(i, k0 + jj, d.T, docs != nullptr, qdoc[r], docs ? kdoc[jj] : 0);
        s[c] = vis ? Ss[row * L::lds + jj] * d.scale : -INFINITY;
        mx = fmaxf(mx, s[c]);
      }
      alpha[r] = st[r].rescale(warp_max<16>(mx));
      float psum = 0.0f;
#pragma unroll
      for (int c = 0; c < kR; ++c) {
        const float p = st[r].prob(s[c]);
        Ps[row * L::ldp + tx + 16 * c] = __float2bfloat16_rn(p);
        psum += p;
      }
      st[r].add(warp_sum<16>(psum));
    }
    __syncthreads();  // P complete; S no longer read (P·V overwrites it)

    StripeAcc<HDP> pv;
    pv.clear();
    pv.add(Ps, Vs);
    pv.store(Ss);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int e = 0; e < E; ++e) o[r][e] = o[r][e] * alpha[r] + Ss[(ty + 16 * r) * L::ldo + tx + 16 * e];
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int i = q0 + ty + 16 * r;
    if (i >= d.T) continue;
    const float inv = st[r].inv_sum();
    float* orow = a.out + d.q_index(b, i, h);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int col = tx + 16 * e;
      if (col < HD) orow[col] = o[r][e] * inv;
    }
    if (tx == 0) a.lse[d.lse_index(b, h, i)] = st[r].lse();
  }
#else
  __trap();
#endif
}

// ---- backward ---------------------------------------------------------------------------------

template <int HDP>
__global__ void __launch_bounds__(kThreads) mma_backward_dkv_kernel(BackwardArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L = Layout<HDP>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_edge;
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem);
  bf16_t* Vs = reinterpret_cast<bf16_t*>(smem + L::tile_h);
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem + 2 * L::tile_h);
  bf16_t* dOs = reinterpret_cast<bf16_t*>(smem + 3 * L::tile_h);
  float* St = reinterpret_cast<float*>(smem + 4 * L::tile_h);                 // Sᵀ [keys][queries]
  float* dPt = reinterpret_cast<float*>(smem + 4 * L::tile_h + L::tile_s);    // dPᵀ
  bf16_t* Pt = reinterpret_cast<bf16_t*>(smem + 4 * L::tile_h + 2 * L::tile_s);
  bf16_t* dSt = reinterpret_cast<bf16_t*>(smem + 4 * L::tile_h + 2 * L::tile_s + L::tile_p);
  float* lse_s = reinterpret_cast<float*>(smem + 4 * L::tile_h + 2 * L::tile_s + 2 * L::tile_p);
  float* delta_s = lse_s + kTile;
  int32_t* qdoc = reinterpret_cast<int32_t*>(delta_s + kTile);

  const Dims& d = a.d;
  const int nbg = d.B * d.G;
  const int kt = static_cast<int>(blockIdx.x) / nbg, bg = static_cast<int>(blockIdx.x) % nbg;
  const int b = bg / d.G, g = bg % d.G, heads = d.NH / d.G, HD = d.HD;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int k0 = kt * kTile, k_valid = min(kTile, d.T - k0);
  const int32_t* docs = a.docs ? a.docs + int64_t(b) * d.T : nullptr;

  load_rows_bf16<HDP>(Ks, a.k + d.kv_index(b, k0, g), int64_t(d.G) * HD, k_valid, HD);
  load_rows_bf16<HDP>(Vs, a.v + d.kv_index(b, k0, g), int64_t(d.G) * HD, k_valid, HD);
  int32_t kdoc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int j = k0 + ty + 16 * r;
    kdoc[r] = docs && j < d.T ? docs[j] : 0;
  }
  // Queries that can see this tile: from its first key to the end of its last key's document.
  const int last_query = docs ? doc_run_edge(docs, d.T, k0 + k_valid - 1, +1, &s_edge) : d.T - 1;

  StripeAcc<HDP> dk, dv;
  dk.clear();
  dv.clear();
  for (int hr = 0; hr < heads; ++hr) {
    const int h = g * heads + hr;
    for (int qt = k0 / kTile; qt <= last_query / kTile; ++qt) {
      const int q0 = qt * kTile, q_valid = min(kTile, d.T - q0);
      __syncthreads();  // the previous tile's Q, dO, Pᵀ, dSᵀ are no longer read
      load_rows_bf16<HDP>(Qs, a.q + d.q_index(b, q0, h), int64_t(d.NH) * HD, q_valid, HD);
      load_rows_bf16<HDP>(dOs, a.dout + d.q_index(b, q0, h), int64_t(d.NH) * HD, q_valid, HD);
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        const bool in = i < q_valid;
        lse_s[i] = in ? a.lse[d.lse_index(b, h, q0 + i)] : 0.0f;
        delta_s[i] = in ? a.delta[d.lse_index(b, h, q0 + i)] : 0.0f;
        qdoc[i] = docs && in ? docs[q0 + i] : 0;
      }
      __syncthreads();

      product_xyt<HDP>(St, Ks, Qs);    // Sᵀ = K·Qᵀ
      product_xyt<HDP>(dPt, Vs, dOs);  // dPᵀ = V·dOᵀ
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int c = 0; c < kR; ++c) {
          const int jj = ty + 16 * r, ii = tx + 16 * c;  // key row, query column
          const bool vis = cuda_math::attention_visible(q0 + ii, k0 + jj, d.T, docs != nullptr, qdoc[ii], kdoc[r]);
          const float p = cuda_math::attention_prob(vis ? St[jj * L::lds + ii] * d.scale : -INFINITY, lse_s[ii]);
          const float ds = cuda_math::attention_dscore(p, dPt[jj * L::lds + ii], delta_s[ii]);
          Pt[jj * L::ldp + ii] = __float2bfloat16_rn(p);
          dSt[jj * L::ldp + ii] = __float2bfloat16_rn(ds);
        }
      __syncthreads();  // Pᵀ, dSᵀ complete
      dv.add(Pt, dOs);  // dV += Pᵀ·dO
      dk.add(dSt, Qs);  // dK += dSᵀ·Q (scaled below)
    }
  }

  __syncthreads();  // every tile read: the f32 results go from the start of shared memory
  float* dKs = reinterpret_cast<float*>(smem);
  float* dVs = reinterpret_cast<float*>(smem + L::tile_o);
  dk.store(dKs);
  dv.store(dVs);
  __syncthreads();
  write_rows<HDP>(dKs, k_valid, HD, d.scale, [&](int row) { return a.dk + d.kv_index(b, k0 + row, g); });
  write_rows<HDP>(dVs, k_valid, HD, 1.0f, [&](int row) { return a.dv + d.kv_index(b, k0 + row, g); });
#else
  __trap();
#endif
}

template <int HDP>
__global__ void __launch_bounds__(kThreads) mma_backward_dq_kernel(BackwardArgs a) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L = Layout<HDP>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_edge;
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem);
  bf16_t* dOs = reinterpret_cast<bf16_t*>(smem + L::tile_h);
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem + 2 * L::tile_h);
  bf16_t* Vs = reinterpret_cast<bf16_t*>(smem + 3 * L::tile_h);
  float* Ss = reinterpret_cast<float*>(smem + 4 * L::tile_h);
  float* dPs = reinterpret_cast<float*>(smem + 4 * L::tile_h + L::tile_s);
  bf16_t* dSs = reinterpret_cast<bf16_t*>(smem + 4 * L::tile_h + 2 * L::tile_s);
  int32_t* kdoc = reinterpret_cast<int32_t*>(smem + 4 * L::tile_h + 2 * L::tile_s + L::tile_p);

  const Dims& d = a.d;
  const QueryTile t = query_tile(d, a.docs, kTile);
  const int b = t.b, h = t.h, q0 = t.q0, q_valid = t.q_valid, HD = d.HD;
  const int32_t* docs = t.docs;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_rows_bf16<HDP>(Qs, a.q + d.q_index(b, q0, h), int64_t(d.NH) * HD, q_valid, HD);
  load_rows_bf16<HDP>(dOs, a.dout + d.q_index(b, q0, h), int64_t(d.NH) * HD, q_valid, HD);
  float lse_r[kR], delta_r[kR];
  int32_t qdoc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int i = q0 + ty + 16 * r;
    const bool in = i < d.T;
    lse_r[r] = in ? a.lse[d.lse_index(b, h, i)] : 0.0f;
    delta_r[r] = in ? a.delta[d.lse_index(b, h, i)] : 0.0f;
    qdoc[r] = docs && in ? docs[i] : 0;
  }
  const int first_key = docs ? doc_run_edge(docs, d.T, q0, -1, &s_edge) : 0;
  const int last_key = q0 + q_valid - 1;

  StripeAcc<HDP> dq;
  dq.clear();
  for (int kt = first_key / kTile; kt <= last_key / kTile; ++kt) {
    const int k0 = kt * kTile, k_valid = min(kTile, d.T - k0);
    __syncthreads();  // the previous tile's K, V, dS are no longer read
    load_rows_bf16<HDP>(Ks, a.k + d.kv_index(b, k0, t.g), int64_t(d.G) * HD, k_valid, HD);
    load_rows_bf16<HDP>(Vs, a.v + d.kv_index(b, k0, t.g), int64_t(d.G) * HD, k_valid, HD);
    if (docs)
      for (int j = threadIdx.x; j < kTile; j += blockDim.x) kdoc[j] = j < k_valid ? docs[k0 + j] : 0;
    __syncthreads();

    product_xyt<HDP>(Ss, Qs, Ks);    // S = Q·Kᵀ
    product_xyt<HDP>(dPs, dOs, Vs);  // dP = dO·Vᵀ
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int c = 0; c < kR; ++c) {
        const int ii = ty + 16 * r, jj = tx + 16 * c;
        const bool vis = cuda_math::attention_visible(q0 + ii, k0 + jj, d.T, docs != nullptr, qdoc[r],
                                                      docs ? kdoc[jj] : 0);
        const float p = cuda_math::attention_prob(vis ? Ss[ii * L::lds + jj] * d.scale : -INFINITY, lse_r[r]);
        dSs[ii * L::ldp + jj] = __float2bfloat16_rn(cuda_math::attention_dscore(p, dPs[ii * L::lds + jj], delta_r[r]));
      }
    __syncthreads();  // dS complete
    dq.add(dSs, Ks);  // dQ += dS·K (scaled below)
  }

  __syncthreads();  // every tile read: dQ (f32) goes from the start of shared memory
  float* dQs = reinterpret_cast<float*>(smem);
  dq.store(dQs);
  __syncthreads();
  write_rows<HDP>(dQs, q_valid, HD, d.scale, [&](int row) { return a.dq + d.q_index(b, q0 + row, h); });
#else
  __trap();
#endif
}

// ---- launch -----------------------------------------------------------------------------------

template <int HDP>
void launch_forward(Context& ctx, const ForwardArgs& a) {
  constexpr size_t smem = Layout<HDP>::forward;
  allow_smem(ctx, mma_forward_kernel<HDP>, smem, "attention_forward (bf16)");
  const unsigned grid = tile_blocks((a.d.T + kTile - 1) / kTile, int64_t(a.d.B) * a.d.NH);
  mma_forward_kernel<HDP><<<grid, kThreads, smem, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
}

template <int HDP>
void launch_backward(Context& ctx, const BackwardArgs& a) {
  constexpr size_t smem_kv = Layout<HDP>::dkv, smem_q = Layout<HDP>::dq;
  allow_smem(ctx, mma_backward_dkv_kernel<HDP>, smem_kv, "attention_backward (bf16 dk, dv)");
  allow_smem(ctx, mma_backward_dq_kernel<HDP>, smem_q, "attention_backward (bf16 dq)");
  const unsigned grid_kv = tile_blocks((a.d.T + kTile - 1) / kTile, int64_t(a.d.B) * a.d.G);
  mma_backward_dkv_kernel<HDP><<<grid_kv, kThreads, smem_kv, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
  const unsigned grid_q = tile_blocks((a.d.T + kTile - 1) / kTile, int64_t(a.d.B) * a.d.NH);
  mma_backward_dq_kernel<HDP><<<grid_q, kThreads, smem_q, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
}

}  // namespace

bool mma_supported(const Context& ctx, int HD) { return ctx.cc_major >= 8 && HD >= 1 && HD <= 128; }

void mma_forward(Context& ctx, const ForwardArgs& a) {
  switch (cuda_math::attention_hd_bucket(a.d.HD)) {
    case 32: launch_forward<32>(ctx, a); break;
    case 64: launch_forward<64>(ctx, a); break;
    default: launch_forward<128>(ctx, a); break;
  }
}

void mma_backward(Context& ctx, const BackwardArgs& a) {
  switch (cuda_math::attention_hd_bucket(a.d.HD)) {
    case 32: launch_backward<32>(ctx, a); break;
    case 64: launch_backward<64>(ctx, a); break;
    default: launch_backward<128>(ctx, a); break;
  }
}

}  // namespace lmt::kernels::cuda::attention_detail
