// Attention of new queries over a KV cache (incremental decoding): kernels/backend.h
// attention_decode and attention_prefill. Forward only.
//
//   decode:  q[B,NH,HD], k_cache/v_cache [B,S,G,HD]; row b attends over cache rows [0, length).
//   prefill: q[n,NH,HD], k_cache/v_cache [1,S,G,HD]; query i attends over rows [0, start + i].
// Both are one kernel: a query row r (batch row for decode, new position for prefill) with its own
// key count length0 + r·length_step and cache base r·cache_row_stride.
//
// One block of 8 warps per (query row, head). Warp w takes keys w, w + 8, ...: its 32 lanes split
// the head dims (lane + 32c, HD <= 256), a warp_sum gives the score, and an online softmax
// (math/online_softmax.h) folds it into the warp's running max, sum and output accumulators. The 8
// warps' partial states are then merged in warp order in shared memory. Deterministic (fixed orders).
#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/online_softmax.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

using cuda_math::OnlineSoftmax;

constexpr int kWarps = 8;
constexpr int kMaxHD = 256;
constexpr int kPerLane = kMaxHD / 32;  // head dims per lane

struct DecodeArgs {
  const float* q;        // [rows, NH, HD]
  const float* k;        // cache of row r at k + r·cache_row_stride: [S, G, HD]
  const float* v;
  float* out;            // [rows, NH, HD]
  int64_t cache_row_stride;
  int64_t length0;       // keys seen by row 0
  int64_t length_step;   // extra keys per row (prefill: 1; decode: 0)
  int NH, G, HD;
  float scale;
};

__global__ void __launch_bounds__(kWarps * 32) attention_decode_kernel(DecodeArgs a) {
  __shared__ float qs[kMaxHD];
  __shared__ float acc_s[kWarps][kMaxHD];
  __shared__ float m_s[kWarps], l_s[kWarps];
  const int row = static_cast<int>(blockIdx.x) / a.NH, h = static_cast<int>(blockIdx.x) % a.NH;
  const int g = h / (a.NH / a.G), HD = a.HD;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t length = a.length0 + int64_t(row) * a.length_step;
  const int64_t q_off = (int64_t(row) * a.NH + h) * HD;
  const int64_t key_stride = int64_t(a.G) * HD;
  const float* kb = a.k + int64_t(row) * a.cache_row_stride + int64_t(g) * HD;
  const float* vb = a.v + int64_t(row) * a.cache_row_stride + int64_t(g) * HD;

  for (int e = threadIdx.x; e < HD; e += blockDim.x) qs[e] = a.q[q_off + e];
  __syncthreads();

  OnlineSoftmax st;
  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  for (int64_t j = warp; j < length; j += kWarps) {
    const float* kj = kb + j * key_stride;
    const float* vj = vb + j * key_stride;
    float part = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int e = lane + 32 * c;
      if (e < HD) part = fmaf(qs[e], kj[e], part);
    }
    const float s = warp_sum(part) * a.scale;  // every lane holds the same score
    float alpha, p;
    st.update(s, alpha, p);
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int e = lane + 32 * c;
      if (e < HD) acc[c] = fmaf(p, vj[e], acc[c] * alpha);
    }
  }
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int e = lane + 32 * c;
    if (e < HD) acc_s[warp][e] = acc[c];
  }
  if (lane == 0) {
    m_s[warp] = st.m;
    l_s[warp] = st.l;
  }
  __syncthreads();

  // Merge the warps' partial softmaxes in warp order (a warp with no keys has l = 0: factor 0).
  for (int e = threadIdx.x; e < HD; e += blockDim.x) {
    OnlineSoftmax total;
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      OnlineSoftmax part;
      part.m = m_s[w];
      part.l = l_s[w];
      const cuda_math::MergeFactors f = total.merge(part);
      o = o * f.self + acc_s[w][e] * f.other;
    }
    a.out[q_off + e] = o * total.inv_sum();
  }
}

void launch(Context& ctx, const DecodeArgs& a, int64_t rows, const char* what) {
  LMT_CHECK(a.HD >= 1 && a.HD <= kMaxHD) << what << ": the cuda backend supports head dims up to " << kMaxHD
                                         << ", got HD=" << a.HD;
  const int64_t blocks = rows * a.NH;
  if (blocks == 0) return;
  LMT_CHECK(blocks <= INT32_MAX) << what << ": " << blocks << " blocks do not fit one grid";
  attention_decode_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, ctx.stream>>>(a);
  LMT_CUDA_LAUNCHED();
}

}  // namespace

void attention_decode(Context& ctx, const TensorView& out, const TensorView& q, const TensorView& k_cache,
                      const TensorView& v_cache, int64_t length, float scale) {
  const int64_t B = q.dim(0), S = k_cache.dim(1), G = k_cache.dim(2);
  DecodeArgs a{dptr<const float>(q), dptr<const float>(k_cache), dptr<const float>(v_cache), dptr<float>(out),
               S * G * q.dim(2), length, 0, static_cast<int>(q.dim(1)), static_cast<int>(G),
               static_cast<int>(q.dim(2)), scale};
  launch(ctx, a, B, "attention_decode");
}

void attention_prefill(Context& ctx, const TensorView& out, const TensorView& q, const TensorView& k_cache,
                       const TensorView& v_cache, int64_t start, float scale) {
  const int64_t n = q.dim(0), G = k_cache.dim(2);
  DecodeArgs a{dptr<const float>(q), dptr<const float>(k_cache), dptr<const float>(v_cache), dptr<float>(out),
               0, start + 1, 1, static_cast<int>(q.dim(1)), static_cast<int>(G),
               static_cast<int>(q.dim(2)), scale};
  launch(ctx, a, n, "attention_prefill");
}

}  // namespace lmt::kernels::cuda
