// Flash attention on bf16 tensor cores, FlashAttention-2 style: the scores never leave registers.
// What attention.cu runs for compute bf16 with HD <= 128 on sm_80 or newer (kernels/backend.h).
//
// Precision: q, k, v, dout, P and dS are rounded to bf16 (round to nearest even) before they enter
// a product; every product accumulates in f32; the softmax statistics (running max, row sums, lse),
// the mask and D = rowsum(dO ∘ O) stay f32. The tensors in global memory stay f32 (the contract).
//
// Softmax in the log2 domain, as FlashAttention-2 does: with x = s·scale·log2(e), exp(s·scale - m) is
// 2^(x - m₂), one fused multiply-add and one ex2.approx (the hardware's 2^x, about 2 ulp) per score;
// the running max is kept in x units and lse is converted back to natural log once per row. The mask
// is evaluated only where a tile can hold an invisible pair: the diagonal tile, a tile past T, or any
// tile when documents are given; every other tile is wholly visible (keys before the first query).
//
// Operands. One pass first packs q, k, v (and dout in backward) into bf16 copies in scratch, head-
// major [B][H][Tp][HDP]: Tp = T rounded up to the 64-row tile, HDP = the head-dim bucket (32, 64,
// 128), padding zero. Every tile is then a contiguous [64][HDP] block, loaded with cp.async (16-byte
// asynchronous copies) into shared memory rows of HDP + 8 elements (ldmatrix reads 8 rows of 16 bytes
// per phase: with that stride they fall in 8 different bank groups), and the next tile's load runs
// while the current one is computed (two buffers, one barrier per tile).
//
// Warp-level products: mma.sync m16n8k16 (bf16 in, f32 accumulate), fragments loaded with ldmatrix
// (.trans where the operand is stored k-major). With g = lane / 4 and t = lane % 4 (PTX ISA, "matrix
// fragments for mma.m16n8k16"): A (16×16) a0 = A[g][2t,2t+1], a1 = A[g+8][2t,..], a2 = A[g][2t+8,..],
// a3 = A[g+8][2t+8,..]; B (16×8) b0 = B[2t,2t+1][g], b1 = B[2t+8,2t+9][g]; C (16×8) c0,c1 = C[g][2t,
// 2t+1], c2,c3 = C[g+8][2t,2t+1]. Two C tiles side by side hold exactly an A fragment's elements, so a
// tile of probabilities computed in registers feeds the next product without a trip through memory.
//
// Kernels (128 threads = 4 warps; each warp owns 16 rows of the block's 64):
//   forward: per (b, h, 64-query tile); per visible 64-key tile: S = Q·Kᵀ (16×64 a warp, 32 f32
//            registers), mask, online softmax (the 4 lanes of a row reduce by shuffles), O += P·V.
//   dK/dV:   per (b, g, 64-key tile); per head of the group and visible 64-query tile: Sᵀ = K·Qᵀ and
//            dPᵀ = V·dOᵀ, then Pᵀ and dSᵀ in place, dV += Pᵀ·dO and dK += dSᵀ·Q.
//   dQ:      per (b, h, 64-query tile); per visible 64-key tile: S, dP = dO·Vᵀ, dS, dQ += dS·K.
// Deterministic: fixed loop orders, no atomics.
#include <cuda_bf16.h>

#include "lmt/kernels/cuda/attention_common.cuh"

namespace lmt::kernels::cuda::attention_detail {
namespace {

using bf16_t = __nv_bfloat16;

constexpr int kThreads = 128;
constexpr int kTile = 64;

// Blocks per SM each kernel is compiled for (__launch_bounds__' second argument): registers are
// granted 8 per thread at a time, so 170 registers fit 2 blocks of 128 threads where 168 fit 3.
template <int HDP> inline constexpr int kForwardBlocks = HDP <= 64 ? 4 : 2;
template <int HDP> inline constexpr int kDkvBlocks = HDP <= 64 ? 3 : 1;
template <int HDP> inline constexpr int kDqBlocks = HDP <= 64 ? 3 : 2;

// ---- PTX wrappers ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
// c += a · b (m16n8k16, bf16 inputs, f32 accumulators).
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats as a bf16 pair, the first in the low half (the lower column of a fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x (ex2.approx.ftz: one MUFU instruction; 2^-inf = +0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One query row's online softmax in the log2 domain (see the top of the file): m = the running max
// of x = s·sl2 (-inf: nothing visible yet), l = this thread's share of Σ 2^(x - m) (the 4 lanes of a
// row hold disjoint columns; finish() adds their shares once, after the last tile).
struct RowSoftmax2 {
  float m = -INFINITY;
  float l = 0.0f;
  // Raises m to cover a tile whose raw scores peak at raw_max (-inf: all masked); returns the factor
  // for the row's accumulators (l is rescaled here). An empty state hands out 0, never NaN.
  __device__ __forceinline__ float rescale(float raw_max, float sl2) {
    const float m_new = fmaxf(m, raw_max * sl2);
    const float alpha = m == -INFINITY ? 0.0f : ex2(m - m_new);
    l *= alpha;
    m = m_new;
    return alpha;
  }
  // The bias b of prob = 2^(s·sl2 + b): -m, or 0 while nothing is visible (every score is -inf then).
  __device__ __forceinline__ float bias() const { return m == -INFINITY ? 0.0f : -m; }
  // After the last tile: the row's total (the 4 lanes' shares), 1/l and the natural-log lse.
  __device__ __forceinline__ void finish() { l = warp_sum<4>(l); }
  __device__ __forceinline__ float inv_sum() const { return l > 0.0f ? 1.0f / l : 0.0f; }
  __device__ __forceinline__ float lse() const { return l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY; }
};

// ---- fragments from shared memory (tiles [rows][ld] bf16, ld = HDP + 8) -------------------------
// A (16×16) at rows r0.., columns k0.. of a row-major tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16_t* tile, int ld, int r0, int k0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4(a, tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + k0 + (lane >> 4) * 8);
}
// B for two n-tiles (n0.., n0 + 8..) where B[k][n] = tile[n][k] (keys or queries stored row by row:
// S = Q·Kᵀ): b[0], b[1] for n-tile n0, b[2], b[3] for n0 + 8.
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const bf16_t* tile, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4(b, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// B for two n-tiles where B[k][n] = tile[k][n] (P·V: k = key row, n = head dim), via .trans.
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const bf16_t* tile, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4_trans(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

// acc[8][4] (16 rows × 64 columns) = rows r0.. of X (16 × HDP) times the 64 rows of Y, transposed.
template <int HDP>
__device__ __forceinline__ void product_rows(float (&acc)[8][4], const bf16_t* X, int r0, const bf16_t* Y) {
  constexpr int ld = HDP + 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HDP / 16; ++kk) {
    uint32_t a[4];
    load_a(a, X, ld, r0, kk * 16);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      load_b_rows(b, Y, ld, np * 16, kk * 16);
      mma16816(acc[2 * np], a, b[0], b[1]);
      mma16816(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[HDP/8][4] += P (16 × 64, in the C fragments of a product_rows) times M (64 × HDP, row-major).
template <int HDP>
__device__ __forceinline__ void accumulate_pm(float (&acc)[HDP / 8][4], const float (&p)[8][4], const bf16_t* M) {
  constexpr int ld = HDP + 8;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const uint32_t a[4] = {pack_bf16(p[2 * kc][0], p[2 * kc][1]), pack_bf16(p[2 * kc][2], p[2 * kc][3]),
                           pack_bf16(p[2 * kc + 1][0], p[2 * kc + 1][1]), pack_bf16(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
    for (int dp = 0; dp < HDP / 16; ++dp) {
      uint32_t b[4];
      load_b_trans(b, M, ld, kc * 16, dp * 16);
      mma16816(acc[2 * dp], a, b[0], b[1]);
      mma16816(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Starts copying the [64][HDP] block at src into a tile of stride HDP + 8.
template <int HDP>
__device__ __forceinline__ void load_tile_async(bf16_t* dst, const bf16_t* src) {
  constexpr int chunks_per_row = HDP / 8;
  for (int c = threadIdx.x; c < kTile * chunks_per_row; c += kThreads) {
    const int r = c / chunks_per_row, e = (c - r * chunks_per_row) * 8;
    cp_async16(dst + r * (HDP + 8) + e, src + r * HDP + e);
  }
}

// Writes a warp's accumulator rows (g, g + 8 of its 16; absolute rows row0, row1) times `mul` to
// rows of HD floats at dst(row); rows >= T are skipped.
template <int HDP, typename RowPtr>
__device__ __forceinline__ void store_rows(const float (&acc)[HDP / 8][4], int row0, int row1, int T, int HD,
                                           float mul0, float mul1, RowPtr dst) {
  const int tq = threadIdx.x & 3;
  float* out0 = row0 < T ? dst(row0) : nullptr;
  float* out1 = row1 < T ? dst(row1) : nullptr;
#pragma unroll
  for (int n = 0; n < HDP / 8; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = 8 * n + 2 * tq + e;
      if (col >= HD) continue;
      if (out0) out0[col] = acc[n][e] * mul0;
      if (out1) out1[col] = acc[n][2 + e] * mul1;
    }
}

template <int HDP>
__device__ __forceinline__ void zero_acc(float (&acc)[HDP / 8][4]) {
#pragma unroll
  for (int n = 0; n < HDP / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Bytes of one [64][HDP + 8] bf16 tile in shared memory.
template <int HDP>
inline constexpr int kTileBytes = kTile * (HDP + 8) * 2;

// The packed bf16 operands: [B][H][Tp][HDP] each (zero padding).
struct Packed {
  const bf16_t* q;
  const bf16_t* k;
  const bf16_t* v;
  const bf16_t* dout;
  int Tp, HDP;
  __device__ int64_t q_tile(const Dims& d, int b, int h, int t0) const {
    return ((int64_t(b) * d.NH + h) * Tp + t0) * HDP;
  }
  __device__ int64_t kv_tile(const Dims& d, int b, int g, int t0) const {
    return ((int64_t(b) * d.G + g) * Tp + t0) * HDP;
  }
};

// dst[b][h][t][0:HDP] = bf16(src[b][t][h][0:HD]), zero where t >= T or d >= HD; 8 elements a thread,
// read as two float4s where `vec` (src 16-byte aligned, HD % 4 == 0) and the 8 lie inside the row.
__global__ void pack_bf16_kernel(bf16_t* dst, const float* src, int B, int T, int H, int HD, int Tp, int HDP,
                                 bool vec) {
  const int per_row = HDP / 8;
  const int64_t n = int64_t(B) * H * Tp * per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % per_row);
    const int64_t row = i / per_row;  // (b·H + h)·Tp + t
    const int t = static_cast<int>(row % Tp);
    const int64_t bh = row / Tp;
    const int h = static_cast<int>(bh % H), b = static_cast<int>(bh / H);
    float v[8];
    const float* row_src = src + ((int64_t(b) * T + t) * H + h) * HD;
    if (vec && t < T && c * 8 + 8 <= HD) {  // two 16-byte loads
      const float4 lo = reinterpret_cast<const float4*>(row_src + c * 8)[0];
      const float4 hi = reinterpret_cast<const float4*>(row_src + c * 8)[1];
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int dd = c * 8 + e;
        v[e] = t < T && dd < HD ? row_src[dd] : 0.0f;
      }
    }
    *reinterpret_cast<uint4*>(dst + row * HDP + c * 8) =
        make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]), pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
  }
}

// Starts loading key tile kt of one (b, kv head) into buffer `buf` of the K and V tiles ([2] each)
// and of the keys' document ids ([2][64], with documents); the caller commits the copies. The forward
// and dQ kernels stream their keys alike.
template <int HDP>
__device__ __forceinline__ void issue_key_tile(bf16_t* Ks, bf16_t* Vs, int32_t* kdoc, const bf16_t* kbase,
                                               const bf16_t* vbase, const int32_t* docs, int T, int kt, int buf) {
  load_tile_async<HDP>(Ks + buf * kTile * (HDP + 8), kbase + int64_t(kt) * kTile * HDP);
  load_tile_async<HDP>(Vs + buf * kTile * (HDP + 8), vbase + int64_t(kt) * kTile * HDP);
  if (docs)
    for (int j = threadIdx.x; j < kTile; j += kThreads) {
      const int key = kt * kTile + j;
      kdoc[buf * kTile + j] = key < T ? docs[key] : 0;
    }
}

// ---- forward ----------------------------------------------------------------------------------

template <int HDP>
__global__ void __launch_bounds__(kThreads, kForwardBlocks<HDP>) fa2_forward_kernel(ForwardArgs a, Packed p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int ld = HDP + 8, TB = kTileBytes<HDP>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_edge;
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem);
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem + TB);      // [2] tiles
  bf16_t* Vs = reinterpret_cast<bf16_t*>(smem + 3 * TB);  // [2] tiles
  int32_t* kdoc = reinterpret_cast<int32_t*>(smem + 5 * TB);  // [2][64]

  const Dims& d = a.d;
  const QueryTile t = query_tile(d, a.docs, kTile);
  const int32_t* docs = t.docs;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int first_key = docs ? doc_run_edge(docs, d.T, t.q0, -1, &s_edge) : 0;
  const int kt_first = first_key / kTile, kt_last = (t.q0 + t.q_valid - 1) / kTile;
  const bf16_t* kbase = p.k + p.kv_tile(d, t.b, t.g, 0);
  const bf16_t* vbase = p.v + p.kv_tile(d, t.b, t.g, 0);
  auto issue_kv = [&](int kt, int buf) { issue_key_tile<HDP>(Ks, Vs, kdoc, kbase, vbase, docs, d.T, kt, buf); };
  load_tile_async<HDP>(Qs, p.q + p.q_tile(d, t.b, t.h, t.q0));
  issue_kv(kt_first, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  uint32_t qf[HDP / 16][4];  // this warp's 16 query rows, as A fragments
#pragma unroll
  for (int kk = 0; kk < HDP / 16; ++kk) load_a(qf[kk], Qs, ld, warp * 16, kk * 16);

  const int i0 = t.q0 + warp * 16 + g, i1 = i0 + 8;
  const int32_t qdoc0 = docs && i0 < d.T ? docs[i0] : 0, qdoc1 = docs && i1 < d.T ? docs[i1] : 0;
  const float sl2 = d.scale * kLog2e;
  RowSoftmax2 st0, st1;
  float o[HDP / 8][4];
  zero_acc<HDP>(o);

  int buf = 0;
  for (int kt = kt_first; kt <= kt_last; ++kt, buf ^= 1) {
    if (kt < kt_last) {
      issue_kv(kt + 1, buf ^ 1);
      cp_async_commit();
    }
    const bf16_t* Kb = Ks + buf * kTile * ld;
    const bf16_t* Vb = Vs + buf * kTile * ld;
    const int32_t* kd = kdoc + buf * kTile;
    const int k0 = kt * kTile;

    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HDP / 16; ++kk)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        load_b_rows(b, Kb, ld, np * 16, kk * 16);
        mma16816(s[2 * np], qf[kk], b[0], b[1]);
        mma16816(s[2 * np + 1], qf[kk], b[2], b[3]);
      }

    // The diagonal tile (the last; keys past T live only there) and document tiles need the mask.
    if (docs != nullptr || kt == kt_last) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int jj = 8 * j + 2 * tq + e, key = k0 + jj;
          const int32_t kdj = docs ? kd[jj] : 0;
          if (!cuda_math::attention_visible(i0, key, d.T, docs != nullptr, qdoc0, kdj)) s[j][e] = -INFINITY;
          if (!cuda_math::attention_visible(i1, key, d.T, docs != nullptr, qdoc1, kdj)) s[j][2 + e] = -INFINITY;
        }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
      mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
    }
    mx0 = warp_max<4>(mx0);
    mx1 = warp_max<4>(mx1);
    const float alpha0 = st0.rescale(mx0, sl2), alpha1 = st1.rescale(mx1, sl2);
    const float b0 = st0.bias(), b1 = st1.bias();
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = ex2(fmaf(s[j][e], sl2, b0));
        s[j][2 + e] = ex2(fmaf(s[j][2 + e], sl2, b1));
        st0.l += s[j][e];
        st1.l += s[j][2 + e];
      }
#pragma unroll
    for (int n = 0; n < HDP / 8; ++n) {
      o[n][0] *= alpha0, o[n][1] *= alpha0;
      o[n][2] *= alpha1, o[n][3] *= alpha1;
    }
    accumulate_pm<HDP>(o, s, Vb);

    cp_async_wait_all();
    __syncthreads();  // the next tile has landed; this one is no longer read
  }

  st0.finish();
  st1.finish();
  store_rows<HDP>(o, i0, i1, d.T, d.HD, st0.inv_sum(), st1.inv_sum(),
                  [&](int i) { return a.out + d.q_index(t.b, i, t.h); });
  if (tq == 0) {
    if (i0 < d.T) a.lse[d.lse_index(t.b, t.h, i0)] = st0.lse();
    if (i1 < d.T) a.lse[d.lse_index(t.b, t.h, i1)] = st1.lse();
  }
#else
  __trap();
#endif
}

// ---- backward: dK, dV -------------------------------------------------------------------------

template <int HDP>
__global__ void __launch_bounds__(kThreads, kDkvBlocks<HDP>) fa2_backward_dkv_kernel(BackwardArgs a, Packed p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int ld = HDP + 8, TB = kTileBytes<HDP>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_edge;
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem);
  bf16_t* Vs = reinterpret_cast<bf16_t*>(smem + TB);
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem + 2 * TB);   // [2] tiles
  bf16_t* dOs = reinterpret_cast<bf16_t*>(smem + 4 * TB);  // [2] tiles
  float* lse_s = reinterpret_cast<float*>(smem + 6 * TB);  // [2][64], lse·log2(e)
  float* delta_s = lse_s + 2 * kTile;                      // [2][64]
  int32_t* qdoc_s = reinterpret_cast<int32_t*>(delta_s + 2 * kTile);  // [2][64]

  const Dims& d = a.d;
  const int nbg = d.B * d.G;
  const int kt = static_cast<int>(blockIdx.x) / nbg, bg = static_cast<int>(blockIdx.x) % nbg;
  const int b = bg / d.G, gk = bg % d.G, heads = d.NH / d.G;
  const int k0 = kt * kTile, k_valid = min(kTile, d.T - k0);
  const int32_t* docs = a.docs ? a.docs + int64_t(b) * d.T : nullptr;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;

  // Queries that can see this tile: from its first key to the end of its last key's document.
  const int last_query = docs ? doc_run_edge(docs, d.T, k0 + k_valid - 1, +1, &s_edge) : d.T - 1;
  const int qt_first = k0 / kTile, n_qt = last_query / kTile - qt_first + 1, steps = heads * n_qt;
  auto issue_q = [&](int step, int buf) {
    const int h = gk * heads + step / n_qt, q0 = (qt_first + step % n_qt) * kTile;
    load_tile_async<HDP>(Qs + buf * kTile * ld, p.q + p.q_tile(d, b, h, q0));
    load_tile_async<HDP>(dOs + buf * kTile * ld, p.dout + p.q_tile(d, b, h, q0));
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool in = q0 + i < d.T;
      lse_s[buf * kTile + i] = in ? a.lse[d.lse_index(b, h, q0 + i)] * kLog2e : 0.0f;  // log2 units
      delta_s[buf * kTile + i] = in ? a.delta[d.lse_index(b, h, q0 + i)] : 0.0f;
      qdoc_s[buf * kTile + i] = docs && in ? docs[q0 + i] : 0;
    }
  };
  load_tile_async<HDP>(Ks, p.k + p.kv_tile(d, b, gk, k0));
  load_tile_async<HDP>(Vs, p.v + p.kv_tile(d, b, gk, k0));
  issue_q(0, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  const int j0 = k0 + warp * 16 + g, j1 = j0 + 8;  // this thread's key rows
  const float sl2 = d.scale * kLog2e;
  const int32_t kdoc0 = docs && j0 < d.T ? docs[j0] : 0, kdoc1 = docs && j1 < d.T ? docs[j1] : 0;
  float dk[HDP / 8][4], dv[HDP / 8][4];
  zero_acc<HDP>(dk);
  zero_acc<HDP>(dv);

  int buf = 0;
  for (int step = 0; step < steps; ++step, buf ^= 1) {
    if (step + 1 < steps) {
      issue_q(step + 1, buf ^ 1);
      cp_async_commit();
    }
    const bf16_t* Qb = Qs + buf * kTile * ld;
    const bf16_t* dOb = dOs + buf * kTile * ld;
    const float* lse_b = lse_s + buf * kTile;
    const float* delta_b = delta_s + buf * kTile;
    const int32_t* qd = qdoc_s + buf * kTile;
    const int q0 = (qt_first + step % n_qt) * kTile;

    float s[8][4], dp[8][4];                     // Sᵀ, dPᵀ: this warp's 16 keys × 64 queries
    product_rows<HDP>(s, Ks, warp * 16, Qb);     // Sᵀ = K·Qᵀ
    product_rows<HDP>(dp, Vs, warp * 16, dOb);   // dPᵀ = V·dOᵀ
    // Invisible pairs exist only in the diagonal tile, the tile reaching past T, or with documents.
    if (docs != nullptr || q0 == k0 || q0 + kTile > d.T) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qc = 8 * j + 2 * tq + e, i = q0 + qc;
#pragma unroll
          for (int r = 0; r < 2; ++r)
            if (!cuda_math::attention_visible(i, r ? j1 : j0, d.T, docs != nullptr, qd[qc], r ? kdoc1 : kdoc0))
              s[j][2 * r + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int qc = 8 * j + 2 * tq + e;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int c = 2 * r + e;
          const float pr = ex2(fmaf(s[j][c], sl2, -lse_b[qc]));  // exp(s·scale - lse); 0 where masked
          dp[j][c] = cuda_math::attention_dscore(pr, dp[j][c], delta_b[qc]);
          s[j][c] = pr;
        }
      }
    accumulate_pm<HDP>(dv, s, dOb);  // dV += Pᵀ·dO
    accumulate_pm<HDP>(dk, dp, Qb);  // dK += dSᵀ·Q (scaled below)

    cp_async_wait_all();
    __syncthreads();
  }

  store_rows<HDP>(dk, j0, j1, d.T, d.HD, d.scale, d.scale, [&](int j) { return a.dk + d.kv_index(b, j, gk); });
  store_rows<HDP>(dv, j0, j1, d.T, d.HD, 1.0f, 1.0f, [&](int j) { return a.dv + d.kv_index(b, j, gk); });
#else
  __trap();
#endif
}

// ---- backward: dQ -----------------------------------------------------------------------------

template <int HDP>
__global__ void __launch_bounds__(kThreads, kDqBlocks<HDP>) fa2_backward_dq_kernel(BackwardArgs a, Packed p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int ld = HDP + 8, TB = kTileBytes<HDP>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_edge;
  bf16_t* Qs = reinterpret_cast<bf16_t*>(smem);
  bf16_t* dOs = reinterpret_cast<bf16_t*>(smem + TB);
  bf16_t* Ks = reinterpret_cast<bf16_t*>(smem + 2 * TB);  // [2] tiles
  bf16_t* Vs = reinterpret_cast<bf16_t*>(smem + 4 * TB);  // [2] tiles
  int32_t* kdoc = reinterpret_cast<int32_t*>(smem + 6 * TB);  // [2][64]

  const Dims& d = a.d;
  const QueryTile t = query_tile(d, a.docs, kTile);
  const int32_t* docs = t.docs;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int first_key = docs ? doc_run_edge(docs, d.T, t.q0, -1, &s_edge) : 0;
  const int kt_first = first_key / kTile, kt_last = (t.q0 + t.q_valid - 1) / kTile;
  const bf16_t* kbase = p.k + p.kv_tile(d, t.b, t.g, 0);
  const bf16_t* vbase = p.v + p.kv_tile(d, t.b, t.g, 0);
  auto issue_kv = [&](int kt, int buf) { issue_key_tile<HDP>(Ks, Vs, kdoc, kbase, vbase, docs, d.T, kt, buf); };
  load_tile_async<HDP>(Qs, p.q + p.q_tile(d, t.b, t.h, t.q0));
  load_tile_async<HDP>(dOs, p.dout + p.q_tile(d, t.b, t.h, t.q0));
  issue_kv(kt_first, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  const int i0 = t.q0 + warp * 16 + g, i1 = i0 + 8;
  const bool in0 = i0 < d.T, in1 = i1 < d.T;
  const int32_t qdoc0 = docs && in0 ? docs[i0] : 0, qdoc1 = docs && in1 ? docs[i1] : 0;
  const float sl2 = d.scale * kLog2e;  // the scores and lse in log2 units
  const float lse0 = in0 ? a.lse[d.lse_index(t.b, t.h, i0)] * kLog2e : 0.0f;
  const float lse1 = in1 ? a.lse[d.lse_index(t.b, t.h, i1)] * kLog2e : 0.0f;
  const float dd0 = in0 ? a.delta[d.lse_index(t.b, t.h, i0)] : 0.0f, dd1 = in1 ? a.delta[d.lse_index(t.b, t.h, i1)] : 0.0f;
  float dq[HDP / 8][4];
  zero_acc<HDP>(dq);

  int buf = 0;
  for (int kt = kt_first; kt <= kt_last; ++kt, buf ^= 1) {
    if (kt < kt_last) {
      issue_kv(kt + 1, buf ^ 1);
      cp_async_commit();
    }
    const bf16_t* Kb = Ks + buf * kTile * ld;
    const bf16_t* Vb = Vs + buf * kTile * ld;
    const int32_t* kd = kdoc + buf * kTile;
    const int k0 = kt * kTile;

    float s[8][4], dp[8][4];
    product_rows<HDP>(s, Qs, warp * 16, Kb);    // S = Q·Kᵀ
    product_rows<HDP>(dp, dOs, warp * 16, Vb);  // dP = dO·Vᵀ
    if (docs != nullptr || kt == kt_last) {     // as in the forward: only these tiles hold masked pairs
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int jj = 8 * j + 2 * tq + e, key = k0 + jj;
          const int32_t kdj = docs ? kd[jj] : 0;
          if (!cuda_math::attention_visible(i0, key, d.T, docs != nullptr, qdoc0, kdj)) s[j][e] = -INFINITY;
          if (!cuda_math::attention_visible(i1, key, d.T, docs != nullptr, qdoc1, kdj)) s[j][2 + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p0 = ex2(fmaf(s[j][e], sl2, -lse0)), p1 = ex2(fmaf(s[j][2 + e], sl2, -lse1));
        dp[j][e] = cuda_math::attention_dscore(p0, dp[j][e], dd0);
        dp[j][2 + e] = cuda_math::attention_dscore(p1, dp[j][2 + e], dd1);
      }
    accumulate_pm<HDP>(dq, dp, Kb);  // dQ += dS·K (scaled below)

    cp_async_wait_all();
    __syncthreads();
  }

  store_rows<HDP>(dq, i0, i1, d.T, d.HD, d.scale, d.scale, [&](int i) { return a.dq + d.q_index(t.b, i, t.h); });
#else
  __trap();
#endif
}

// ---- launch -----------------------------------------------------------------------------------

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// Bytes of one packed operand with H heads.
size_t packed_bytes(const Dims& d, int H, int Tp, int HDP) {
  return align256(size_t(d.B) * size_t(H) * size_t(Tp) * size_t(HDP) * sizeof(bf16_t));
}

void pack(Context& ctx, bf16_t* dst, const float* src, const Dims& d, int H, int Tp, int HDP) {
  const int64_t n = int64_t(d.B) * H * Tp * (HDP / 8);
  const bool vec = aligned(src, 16) && d.HD % 4 == 0;
  pack_bf16_kernel<<<blocks_for(n, 256), 256, 0, ctx.stream>>>(dst, src, d.B, d.T, H, d.HD, Tp, HDP, vec);
  LMT_CUDA_LAUNCHED();
}

template <int HDP>
void launch_forward(Context& ctx, const ForwardArgs& a, const Packed& p) {
  constexpr size_t smem = 5 * kTileBytes<HDP> + 2 * kTile * sizeof(int32_t);
  allow_smem(ctx, fa2_forward_kernel<HDP>, smem, "attention_forward (bf16, fa2)");
  const unsigned grid = tile_blocks((a.d.T + kTile - 1) / kTile, int64_t(a.d.B) * a.d.NH);
  fa2_forward_kernel<HDP><<<grid, kThreads, smem, ctx.stream>>>(a, p);
  LMT_CUDA_LAUNCHED();
}

template <int HDP>
void launch_backward(Context& ctx, const BackwardArgs& a, const Packed& p) {
  constexpr size_t smem_kv = 6 * kTileBytes<HDP> + 6 * kTile * sizeof(float);
  constexpr size_t smem_q = 6 * kTileBytes<HDP> + 2 * kTile * sizeof(int32_t);
  allow_smem(ctx, fa2_backward_dkv_kernel<HDP>, smem_kv, "attention_backward (bf16 dk, dv, fa2)");
  allow_smem(ctx, fa2_backward_dq_kernel<HDP>, smem_q, "attention_backward (bf16 dq, fa2)");
  const unsigned grid_kv = tile_blocks((a.d.T + kTile - 1) / kTile, int64_t(a.d.B) * a.d.G);
  fa2_backward_dkv_kernel<HDP><<<grid_kv, kThreads, smem_kv, ctx.stream>>>(a, p);
  LMT_CUDA_LAUNCHED();
  const unsigned grid_q = tile_blocks((a.d.T + kTile - 1) / kTile, int64_t(a.d.B) * a.d.NH);
  fa2_backward_dq_kernel<HDP><<<grid_q, kThreads, smem_q, ctx.stream>>>(a, p);
  LMT_CUDA_LAUNCHED();
}

int bucket_of(const Dims& d) { return cuda_math::attention_hd_bucket(d.HD); }
int padded_len(const Dims& d) { return (d.T + kTile - 1) / kTile * kTile; }

}  // namespace

bool fa2_supported(const Context& ctx, int HD) { return ctx.cc_major >= 8 && HD >= 1 && HD <= 128; }

void fa2_forward(Context& ctx, const ForwardArgs& a) {
  const Dims& d = a.d;
  const int HDP = bucket_of(d), Tp = padded_len(d);
  const size_t qb = packed_bytes(d, d.NH, Tp, HDP), kb = packed_bytes(d, d.G, Tp, HDP);
  char* s = static_cast<char*>(ctx.scratch(qb + 2 * kb));
  bf16_t* q = reinterpret_cast<bf16_t*>(s);
  bf16_t* k = reinterpret_cast<bf16_t*>(s + qb);
  bf16_t* v = reinterpret_cast<bf16_t*>(s + qb + kb);
  pack(ctx, q, a.q, d, d.NH, Tp, HDP);
  pack(ctx, k, a.k, d, d.G, Tp, HDP);
  pack(ctx, v, a.v, d, d.G, Tp, HDP);
  const Packed p{q, k, v, nullptr, Tp, HDP};
  switch (HDP) {
    case 32: launch_forward<32>(ctx, a, p); break;
    case 64: launch_forward<64>(ctx, a, p); break;
    default: launch_forward<128>(ctx, a, p); break;
  }
}

void fa2_backward(Context& ctx, const BackwardArgs& args, const float* out) {
  const Dims& d = args.d;
  const int HDP = bucket_of(d), Tp = padded_len(d);
  const size_t delta_bytes = align256(size_t(d.B) * size_t(d.NH) * size_t(d.T) * sizeof(float));
  const size_t qb = packed_bytes(d, d.NH, Tp, HDP), kb = packed_bytes(d, d.G, Tp, HDP);
  char* s = static_cast<char*>(ctx.scratch(delta_bytes + 2 * qb + 2 * kb));
  BackwardArgs a = args;
  a.delta = reinterpret_cast<float*>(s);
  attention_delta_into(ctx, out, a.dout, d, reinterpret_cast<float*>(s));
  s += delta_bytes;
  bf16_t* q = reinterpret_cast<bf16_t*>(s);
  bf16_t* k = reinterpret_cast<bf16_t*>(s + qb);
  bf16_t* v = reinterpret_cast<bf16_t*>(s + qb + kb);
  bf16_t* dout = reinterpret_cast<bf16_t*>(s + qb + 2 * kb);
  pack(ctx, q, a.q, d, d.NH, Tp, HDP);
  pack(ctx, k, a.k, d, d.G, Tp, HDP);
  pack(ctx, v, a.v, d, d.G, Tp, HDP);
  pack(ctx, dout, a.dout, d, d.NH, Tp, HDP);
  const Packed p{q, k, v, dout, Tp, HDP};
  switch (HDP) {
    case 32: launch_backward<32>(ctx, a, p); break;
    case 64: launch_backward<64>(ctx, a, p); break;
    default: launch_backward<128>(ctx, a, p); break;
  }
}

}  // namespace lmt::kernels::cuda::attention_detail
