// Flash attention (FlashAttention-2 algorithm, f32 SIMT) for causal grouped-query attention with
// optional document masking: kernels/backend.h attention_forward / attention_backward. With compute
// bf16 and HD <= 128 the entry points at the end hand over to the tensor-core kernels of
// attention_fa2.cu instead. Layouts: attention_common.cuh.
//
// Every kernel runs 256 threads as a 16×16 grid (ty, tx). A thread owns tile rows ty + 16r and
// columns tx + 16c (scores), or rows ty + 16r and head dims tx + 16e (accumulators), so the 16
// threads of a half-warp share a row: row reductions are 4 xor-shuffles, and shared-memory reads are
// broadcasts or consecutive words. Dot products over HD read float4s; rows in shared memory are
// padded (attention_tile_ld: an odd multiple of 4, extra columns zero) so threads reading different
// rows at one column hit different banks.
//
// forward: one block per (b, h, query tile); keys/values stream through shared memory a tile at a
//   time; the online softmax (math/online_softmax.h) keeps the running max and sum per row. Only
//   key tiles that can be visible are visited: from the tile holding the start of the first query's
//   document up to the diagonal.
// backward: D = rowsum(dO ∘ O) first (scratch), then
//   dK/dV: one block per (b, g, key tile), looping over the NH/G heads of the group and the query
//          tiles that can see the keys, accumulating dK and dV in registers (no atomics);
//   dQ:    one block per (b, h, query tile), looping over key tiles, accumulating dQ in registers.
//   Both recompute P = exp(scale·S - lse). The result is deterministic (fixed orders, no atomics on
//   floats).
//
// Tile sizes per head-dim bucket (32/64/128/256) are in math/online_softmax.h (attention_tiles);
// shared memory stays under 99 KB (cudaFuncSetAttribute raises the 48 KB default per launch).
#include "lmt/kernels/cuda/attention_common.cuh"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

using namespace attention_detail;

using cuda_math::AttentionTiles;
using cuda_math::OnlineSoftmax;

constexpr int kThreads = 256;  // 16 × 16
// Two blocks per SM (caps registers at 128 a thread): the shared memory of two blocks fits an SM.
constexpr int kMinBlocks = 2;

using cuda_math::attention_prob_ld;
using cuda_math::attention_tile_ld;

// ---- device helpers ---------------------------------------------------------------------------

// Copies `rows` rows of HD floats (global row stride `stride`) to shared memory with row stride ld,
// zero-filling columns [HD, HD rounded up to 4) (the float4 dot products read them) and rows >= valid
// (padding rows beyond T must hold finite values: they meet P = 0).
__device__ __forceinline__ void load_rows(float* dst, int ld, const float* src, int64_t stride, int rows,
                                          int valid, int HD) {
  if ((HD & 3) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {  // stride is a multiple of HD
    const int quads = HD >> 2;
    for (int idx = threadIdx.x; idx < rows * quads; idx += blockDim.x) {
      const int r = idx / quads, e = (idx - r * quads) * 4;
      const float4 x = r < valid ? *reinterpret_cast<const float4*>(src + r * stride + e) : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(dst + r * ld + e) = x;
    }
  } else {
    const int hd4 = (HD + 3) & ~3;
    for (int idx = threadIdx.x; idx < rows * hd4; idx += blockDim.x) {
      const int r = idx / hd4, e = idx - r * hd4;
      dst[r * ld + e] = r < valid && e < HD ? src[r * stride + e] : 0.0f;
    }
  }
}

// Loads the key and value rows [k0, k0 + BK) of kv head g (rows >= k_valid zeroed) and, with a
// document mask, their document ids, into shared memory. The caller synchronises before and after.
__device__ __forceinline__ void load_kv_tile(float* Ks, float* Vs, int32_t* kdoc, const float* k, const float* v,
                                             const Dims& d, const QueryTile& t, int k0, int k_valid, int BK, int ld) {
  load_rows(Ks, ld, k + d.kv_index(t.b, k0, t.g), int64_t(d.G) * d.HD, BK, k_valid, d.HD);
  load_rows(Vs, ld, v + d.kv_index(t.b, k0, t.g), int64_t(d.G) * d.HD, BK, k_valid, d.HD);
  if (t.docs)
    for (int j = threadIdx.x; j < BK; j += blockDim.x) kdoc[j] = j < k_valid ? t.docs[k0 + j] : 0;
}

__device__ __forceinline__ float component(const float4& v, int u) {
  return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}


// acc[r][c] = Σ_{e<hd4} A[(ty+16r)·ld + e] · Bm[(tx+16c)·ld + e]: a tile of dot products between rows
// of two padded shared-memory tiles (hd4 = HD rounded up to 4; the extra columns are zero).
template <int R, int C>
__device__ __forceinline__ void dot_tile(float (&acc)[R][C], const float* A, const float* Bm, int ld, int hd4,
                                         int ty, int tx) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
#pragma unroll 1
  for (int e = 0; e < hd4; e += 4) {
    float4 a[R], bv[C];
#pragma unroll
    for (int r = 0; r < R; ++r) a[r] = *reinterpret_cast<const float4*>(A + (ty + 16 * r) * ld + e);
#pragma unroll
    for (int c = 0; c < C; ++c) bv[c] = *reinterpret_cast<const float4*>(Bm + (tx + 16 * c) * ld + e);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) {
        acc[r][c] = fmaf(a[r].x, bv[c].x, acc[r][c]);
        acc[r][c] = fmaf(a[r].y, bv[c].y, acc[r][c]);
        acc[r][c] = fmaf(a[r].z, bv[c].z, acc[r][c]);
        acc[r][c] = fmaf(a[r].w, bv[c].w, acc[r][c]);
      }
  }
}

// acc[r][e] += Σ_{j<n} P[(ty+16r)·ldp + j] · M[j·ldm + tx+16e] for head dims tx+16e < HD: a tile of
// probabilities (or dS) times a tile of rows (V, dO, Q or K). n is a multiple of 4 (P read as float4).
template <int R, int E>
__device__ __forceinline__ void pv_tile(float (&acc)[R][E], const float* P, int ldp, const float* M, int ldm,
                                        int n, int HD, int ty, int tx) {
  for (int j = 0; j < n; j += 4) {
    float4 p[R];
#pragma unroll
    for (int r = 0; r < R; ++r) p[r] = *reinterpret_cast<const float4*>(P + (ty + 16 * r) * ldp + j);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float m[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int col = tx + 16 * e;
        m[e] = col < HD ? M[(j + u) * ldm + col] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float pu = component(p[r], u);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[r][e] = fmaf(pu, m[e], acc[r][e]);
      }
    }
  }
}

// ---- forward ----------------------------------------------------------------------------------

template <int HDMAX>
__global__ void __launch_bounds__(kThreads, kMinBlocks) flash_forward_kernel(ForwardArgs a) {
  constexpr AttentionTiles tiles = cuda_math::attention_tiles(HDMAX);
  constexpr int BQ = tiles.fwd_q, BK = tiles.fwd_k, RQ = BQ / 16, RK = BK / 16, E = HDMAX / 16;
  extern __shared__ __align__(16) float smem[];
  __shared__ int s_edge;
  const Dims& d = a.d;
  const int HD = d.HD, hd4 = (HD + 3) & ~3, ld = attention_tile_ld(HD);
  constexpr int PLD = attention_prob_ld(BK);
  float* Qs = smem;               // [BQ][ld]
  float* Ks = Qs + BQ * ld;       // [BK][ld]
  float* Vs = Ks + BK * ld;       // [BK][ld]
  float* Ps = Vs + BK * ld;       // [BQ][PLD]
  int32_t* kdoc = reinterpret_cast<int32_t*>(Ps + BQ * PLD);  // [BK]

  const QueryTile t = query_tile(d, a.docs, BQ);
  const int b = t.b, h = t.h, q0 = t.q0, q_valid = t.q_valid;
  const int32_t* docs = t.docs;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_rows(Qs, ld, a.q + d.q_index(b, q0, h), int64_t(d.NH) * HD, BQ, q_valid, HD);
  int32_t qdoc[RQ];
#pragma unroll
  for (int r = 0; r < RQ; ++r) {
    const int i = q0 + ty + 16 * r;
    qdoc[r] = docs && i < d.T ? docs[i] : 0;
  }
  const int first_key = docs ? doc_run_edge(docs, d.T, q0, -1, &s_edge) : 0;
  const int last_key = q0 + q_valid - 1;

  OnlineSoftmax st[RQ];
  float o[RQ][E];
#pragma unroll
  for (int r = 0; r < RQ; ++r)
#pragma unroll
    for (int e = 0; e < E; ++e) o[r][e] = 0.0f;

  for (int kt = first_key / BK; kt <= last_key / BK; ++kt) {
    const int k0 = kt * BK, k_valid = min(BK, d.T - k0);
    __syncthreads();  // the previous tile's Ks, Vs, Ps are no longer read
    load_kv_tile(Ks, Vs, kdoc, a.k, a.v, d, t, k0, k_valid, BK, ld);
    __syncthreads();

    float s[RQ][RK];
    dot_tile(s, Qs, Ks, ld, hd4, ty, tx);
#pragma unroll
    for (int r = 0; r < RQ; ++r) {
      const int i = q0 + ty + 16 * r;
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < RK; ++c) {
        const int jj = tx + 16 * c;
        const bool vis = cuda_math::attention_visible(i, k0 + jj, d.T, docs != nullptr, qdoc[r],
                                                      docs ? kdoc[jj] : 0);
        s[r][c] = vis ? s[r][c] * d.scale : -INFINITY;
        mx = fmaxf(mx, s[r][c]);
      }
      const float alpha = st[r].rescale(warp_max<16>(mx));
      float psum = 0.0f;
#pragma unroll
      for (int c = 0; c < RK; ++c) {
        const float p = st[r].prob(s[r][c]);
        Ps[(ty + 16 * r) * PLD + tx + 16 * c] = p;
        psum += p;
      }
      st[r].add(warp_sum<16>(psum));
#pragma unroll
      for (int e = 0; e < E; ++e) o[r][e] *= alpha;
    }
    __syncthreads();  // Ps complete
    pv_tile(o, Ps, PLD, Vs, ld, BK, HD, ty, tx);
  }

#pragma unroll
  for (int r = 0; r < RQ; ++r) {
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
}

// ---- backward ---------------------------------------------------------------------------------

// D[b,h,t] = Σ_e dout · out over one row of HD; one warp per row, grid-stride over B·T·NH rows.
__global__ void attention_delta_kernel(const float* out, const float* dout, float* delta, int64_t rows, int T,
                                       int NH, int HD) {
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
  for (int64_t row = int64_t(blockIdx.x) * warps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * warps) {
    const float* o = out + row * HD;
    const float* dO = dout + row * HD;
    float acc = 0.0f;
    for (int e = lane; e < HD; e += 32) acc = fmaf(o[e], dO[e], acc);
    acc = warp_sum(acc);
    const int64_t h = row % NH, bt = row / NH, t = bt % T, b = bt / T;
    if (lane == 0) delta[(b * NH + h) * T + t] = acc;
  }
}

template <int HDMAX>
__global__ void __launch_bounds__(kThreads, kMinBlocks) flash_backward_dkv_kernel(BackwardArgs a) {
  constexpr AttentionTiles tiles = cuda_math::attention_tiles(HDMAX);
  constexpr int BK = tiles.dkv_k, BQ = tiles.dkv_q, RK = BK / 16, RQ = BQ / 16, E = HDMAX / 16;
  extern __shared__ __align__(16) float smem[];
  __shared__ int s_edge;
  const Dims& d = a.d;
  const int HD = d.HD, hd4 = (HD + 3) & ~3, ld = attention_tile_ld(HD);
  constexpr int PLD = attention_prob_ld(BQ);
  float* Ks = smem;                  // [BK][ld]
  float* Vs = Ks + BK * ld;          // [BK][ld]
  float* Qs = Vs + BK * ld;          // [BQ][ld]
  float* dOs = Qs + BQ * ld;         // [BQ][ld]
  float* PdS = dOs + BQ * ld;        // [BK][PLD]: Pᵀ, then dSᵀ
  float* lse_s = PdS + BK * PLD;     // [BQ]
  float* delta_s = lse_s + BQ;         // [BQ]
  int32_t* qdoc = reinterpret_cast<int32_t*>(delta_s + BQ);  // [BQ]

  // The first key tiles are seen by the most queries: schedule them first.
  const int nbg = d.B * d.G;
  const int kt = static_cast<int>(blockIdx.x) / nbg, bg = static_cast<int>(blockIdx.x) % nbg;
  const int b = bg / d.G, g = bg % d.G, heads = d.NH / d.G;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int k0 = kt * BK, k_valid = min(BK, d.T - k0);
  const int32_t* docs = a.docs ? a.docs + int64_t(b) * d.T : nullptr;

  load_rows(Ks, ld, a.k + d.kv_index(b, k0, g), int64_t(d.G) * HD, BK, k_valid, HD);
  load_rows(Vs, ld, a.v + d.kv_index(b, k0, g), int64_t(d.G) * HD, BK, k_valid, HD);
  int32_t kdoc[RK];
#pragma unroll
  for (int r = 0; r < RK; ++r) {
    const int j = k0 + ty + 16 * r;
    kdoc[r] = docs && j < d.T ? docs[j] : 0;
  }
  // Queries that can see this tile: from its first key to the end of its last key's document.
  const int last_query = docs ? doc_run_edge(docs, d.T, k0 + k_valid - 1, +1, &s_edge) : d.T - 1;

  float dk[RK][E], dv[RK][E];
#pragma unroll
  for (int r = 0; r < RK; ++r)
#pragma unroll
    for (int e = 0; e < E; ++e) dk[r][e] = dv[r][e] = 0.0f;

  for (int hr = 0; hr < heads; ++hr) {
    const int h = g * heads + hr;
    for (int qt = k0 / BQ; qt <= last_query / BQ; ++qt) {
      const int q0 = qt * BQ, q_valid = min(BQ, d.T - q0);
      __syncthreads();  // the previous tile's Qs, dOs, PdS are no longer read
      load_rows(Qs, ld, a.q + d.q_index(b, q0, h), int64_t(d.NH) * HD, BQ, q_valid, HD);
      load_rows(dOs, ld, a.dout + d.q_index(b, q0, h), int64_t(d.NH) * HD, BQ, q_valid, HD);
      for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
        const bool in = i < q_valid;
        lse_s[i] = in ? a.lse[d.lse_index(b, h, q0 + i)] : 0.0f;
        delta_s[i] = in ? a.delta[d.lse_index(b, h, q0 + i)] : 0.0f;
        qdoc[i] = docs && in ? docs[q0 + i] : 0;
      }
      __syncthreads();

      float s[RK][RQ], dp[RK][RQ];  // become P and dS in place
      dot_tile(s, Ks, Qs, ld, hd4, ty, tx);    // Sᵀ: keys × queries
      dot_tile(dp, Vs, dOs, ld, hd4, ty, tx);  // dPᵀ
#pragma unroll
      for (int r = 0; r < RK; ++r)
#pragma unroll
        for (int c = 0; c < RQ; ++c) {
          const int ii = tx + 16 * c, jj = ty + 16 * r;
          const bool vis = cuda_math::attention_visible(q0 + ii, k0 + jj, d.T, docs != nullptr, qdoc[ii], kdoc[r]);
          s[r][c] = cuda_math::attention_prob(vis ? s[r][c] * d.scale : -INFINITY, lse_s[ii]);
          dp[r][c] = cuda_math::attention_dscore(s[r][c], dp[r][c], delta_s[ii]);
          PdS[jj * PLD + ii] = s[r][c];
        }
      __syncthreads();  // Pᵀ complete
      pv_tile(dv, PdS, PLD, dOs, ld, BQ, HD, ty, tx);  // dV += Pᵀ dO
      __syncthreads();  // Pᵀ no longer read
#pragma unroll
      for (int r = 0; r < RK; ++r)
#pragma unroll
        for (int c = 0; c < RQ; ++c) PdS[(ty + 16 * r) * PLD + tx + 16 * c] = dp[r][c];
      __syncthreads();  // dSᵀ complete
      pv_tile(dk, PdS, PLD, Qs, ld, BQ, HD, ty, tx);   // dK += dSᵀ Q (scaled below)
    }
  }

#pragma unroll
  for (int r = 0; r < RK; ++r) {
    const int j = k0 + ty + 16 * r;
    if (j >= d.T) continue;
    float* dkrow = a.dk + d.kv_index(b, j, g);
    float* dvrow = a.dv + d.kv_index(b, j, g);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int col = tx + 16 * e;
      if (col < HD) {
        dkrow[col] = dk[r][e] * d.scale;
        dvrow[col] = dv[r][e];
      }
    }
  }
}

template <int HDMAX>
__global__ void __launch_bounds__(kThreads, kMinBlocks) flash_backward_dq_kernel(BackwardArgs a) {
  constexpr AttentionTiles tiles = cuda_math::attention_tiles(HDMAX);
  constexpr int BQ = tiles.dq_q, BK = tiles.dq_k, RQ = BQ / 16, RK = BK / 16, E = HDMAX / 16;
  extern __shared__ __align__(16) float smem[];
  __shared__ int s_edge;
  const Dims& d = a.d;
  const int HD = d.HD, hd4 = (HD + 3) & ~3, ld = attention_tile_ld(HD);
  constexpr int PLD = attention_prob_ld(BK);
  float* Qs = smem;               // [BQ][ld]
  float* dOs = Qs + BQ * ld;      // [BQ][ld]
  float* Ks = dOs + BQ * ld;      // [BK][ld]
  float* Vs = Ks + BK * ld;       // [BK][ld]
  float* dSs = Vs + BK * ld;      // [BQ][PLD]
  int32_t* kdoc = reinterpret_cast<int32_t*>(dSs + BQ * PLD);  // [BK]

  const QueryTile t = query_tile(d, a.docs, BQ);
  const int b = t.b, h = t.h, q0 = t.q0, q_valid = t.q_valid;
  const int32_t* docs = t.docs;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;

  load_rows(Qs, ld, a.q + d.q_index(b, q0, h), int64_t(d.NH) * HD, BQ, q_valid, HD);
  load_rows(dOs, ld, a.dout + d.q_index(b, q0, h), int64_t(d.NH) * HD, BQ, q_valid, HD);
  float lse_r[RQ], delta_r[RQ];
  int32_t qdoc[RQ];
#pragma unroll
  for (int r = 0; r < RQ; ++r) {
    const int i = q0 + ty + 16 * r;
    const bool in = i < d.T;
    lse_r[r] = in ? a.lse[d.lse_index(b, h, i)] : 0.0f;
    delta_r[r] = in ? a.delta[d.lse_index(b, h, i)] : 0.0f;
    qdoc[r] = docs && in ? docs[i] : 0;
  }
  const int first_key = docs ? doc_run_edge(docs, d.T, q0, -1, &s_edge) : 0;
  const int last_key = q0 + q_valid - 1;

  float dq[RQ][E];
#pragma unroll
  for (int r = 0; r < RQ; ++r)
#pragma unroll
    for (int e = 0; e < E; ++e) dq[r][e] = 0.0f;

  for (int kt = first_key / BK; kt <= last_key / BK; ++kt) {
    const int k0 = kt * BK, k_valid = min(BK, d.T - k0);
    __syncthreads();  // the previous tile's Ks, Vs, dSs are no longer read
    load_kv_tile(Ks, Vs, kdoc, a.k, a.v, d, t, k0, k_valid, BK, ld);
    __syncthreads();

    float s[RQ][RK], dp[RQ][RK];
    dot_tile(s, Qs, Ks, ld, hd4, ty, tx);
    dot_tile(dp, dOs, Vs, ld, hd4, ty, tx);
#pragma unroll
    for (int r = 0; r < RQ; ++r)
#pragma unroll
      for (int c = 0; c < RK; ++c) {
        const int ii = ty + 16 * r, jj = tx + 16 * c;
        const bool vis = cuda_math::attention_visible(q0 + ii, k0 + jj, d.T, docs != nullptr, qdoc[r],
                                                      docs ? kdoc[jj] : 0);
        const float p = cuda_math::attention_prob(vis ? s[r][c] * d.scale : -INFINITY, lse_r[r]);
        dSs[ii * PLD + jj] = cuda_math::attention_dscore(p, dp[r][c], delta_r[r]);
      }
    __syncthreads();  // dSs complete
    pv_tile(dq, dSs, PLD, Ks, ld, BK, HD, ty, tx);  // dQ += dS K (scaled below)
  }

#pragma unroll
  for (int r = 0; r < RQ; ++r) {
    const int i = q0 + ty + 16 * r;
    if (i >= d.T) continue;
    float* dqrow = a.dq + d.q_index(b, i, h);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int col = tx + 16 * e;
      if (col < HD) dqrow[col] = dq[r][e] * d.scale;
    }
  }
}

// ---- launch -----------------------------------------------------------------------------------

template <int HDMAX>
void launch_forward(Context& ctx, const ForwardArgs& a) {
  constexpr AttentionTiles t = cuda_math::attention_tiles(HDMAX);
  const size_t smem = static_cast<size_t>(cuda_math::attention_forward_smem(HDMAX, a.d.HD));
  allow_smem(ctx, flash_forward_kernel<HDMAX>, smem, "attention_forward");
  const unsigned grid = tile_blocks((a.d.T + t.fwd_q - 1) / t.fwd_q, int64_t(a.d.B) * a.d.NH);
  flash_forward_kernel<HDMAX><<<grid, kThreads, smem, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
}

template <int HDMAX>
void launch_backward(Context& ctx, const BackwardArgs& a) {
  constexpr AttentionTiles t = cuda_math::attention_tiles(HDMAX);
  const size_t smem_kv = static_cast<size_t>(cuda_math::attention_dkv_smem(HDMAX, a.d.HD));
  const size_t smem_q = static_cast<size_t>(cuda_math::attention_dq_smem(HDMAX, a.d.HD));
  allow_smem(ctx, flash_backward_dkv_kernel<HDMAX>, smem_kv, "attention_backward (dk, dv)");
  allow_smem(ctx, flash_backward_dq_kernel<HDMAX>, smem_q, "attention_backward (dq)");
  const unsigned grid_kv = tile_blocks((a.d.T + t.dkv_k - 1) / t.dkv_k, int64_t(a.d.B) * a.d.G);
  flash_backward_dkv_kernel<HDMAX><<<grid_kv, kThreads, smem_kv, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
  const unsigned grid_q = tile_blocks((a.d.T + t.dq_q - 1) / t.dq_q, int64_t(a.d.B) * a.d.NH);
  flash_backward_dq_kernel<HDMAX><<<grid_q, kThreads, smem_q, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
}

}  // namespace

void attention_forward(Context& ctx, const TensorView& out, const TensorView& lse, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& doc_ids, float scale,
                       DType compute) {
  const Dims d = dims_of(q, k, scale);
  if (q.numel() == 0) return;
  const ForwardArgs a{d, dptr<const float>(q), dptr<const float>(k), dptr<const float>(v),
                      dptr<const int32_t>(doc_ids), dptr<float>(out), dptr<float>(lse)};
  if (compute == DType::kBF16 && fa2_supported(ctx, d.HD)) return fa2_forward(ctx, a);
  switch (cuda_math::attention_hd_bucket(d.HD)) {
    case 32: launch_forward<32>(ctx, a); break;
    case 64: launch_forward<64>(ctx, a); break;
    case 128: launch_forward<128>(ctx, a); break;
    default: launch_forward<256>(ctx, a); break;
  }
}

void attention_backward(Context& ctx, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& dout, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const TensorView& lse,
                        const TensorView& doc_ids, float scale, DType compute) {
  const Dims d = dims_of(q, k, scale);
  if (q.numel() == 0) return;
  BackwardArgs a{d, dptr<const float>(q), dptr<const float>(k), dptr<const float>(v),
                 dptr<const float>(dout), dptr<const float>(lse), nullptr, dptr<const int32_t>(doc_ids),
                 dptr<float>(dq), dptr<float>(dk), dptr<float>(dv)};
  if (compute == DType::kBF16 && fa2_supported(ctx, d.HD)) return fa2_backward(ctx, a, dptr<const float>(out));
  const int64_t rows = int64_t(d.B) * d.T * d.NH;
  float* delta = static_cast<float*>(ctx.scratch(sizeof(float) * static_cast<size_t>(rows)));
  attention_delta_into(ctx, dptr<const float>(out), a.dout, d, delta);
  a.delta = delta;
  switch (cuda_math::attention_hd_bucket(d.HD)) {
    case 32: launch_backward<32>(ctx, a); break;
    case 64: launch_backward<64>(ctx, a); break;
    case 128: launch_backward<128>(ctx, a); break;
    default: launch_backward<256>(ctx, a); break;
  }
}

namespace attention_detail {
void attention_delta_into(Context& ctx, const float* out, const float* dout, const Dims& d, float* delta) {
  const int64_t rows = int64_t(d.B) * d.T * d.NH;
  attention_delta_kernel<<<blocks_for(rows, kThreads / 32), kThreads, 0, ctx.stream>>>(out, dout, delta, rows, d.T,
                                                                                       d.NH, d.HD);
  LMT_CUDA_LAUNCHED();
}
}  // namespace attention_detail

}  // namespace lmt::kernels::cuda
