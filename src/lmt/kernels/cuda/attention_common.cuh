// What the attention kernels of kernels/cuda share: f32 SIMT (attention.cu) and bf16 tensor cores
// (attention_fa2.cu). Internal to kernels/cuda.
//
// Layout: q, out, dout, dq [B,T,NH,HD]; k, v, dk, dv [B,T,G,HD]; lse and D [B,NH,T]; doc_ids [B,T]
// i32 (optional, documents are contiguous runs). Query head h reads kv head h / (NH/G).
#pragma once

#include <climits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/online_softmax.h"

namespace lmt::kernels::cuda::attention_detail {

struct Dims {
  int B, T, NH, G, HD;
  float scale;
  __device__ int64_t q_index(int b, int t, int h) const { return ((int64_t(b) * T + t) * NH + h) * HD; }
  __device__ int64_t kv_index(int b, int t, int g) const { return ((int64_t(b) * T + t) * G + g) * HD; }
  __device__ int64_t lse_index(int b, int h, int t) const { return (int64_t(b) * NH + h) * T + t; }
};

struct ForwardArgs {
  Dims d;
  const float* q;
  const float* k;
  const float* v;
  const int32_t* docs;  // nullptr: no document mask
  float* out;
  float* lse;
};

struct BackwardArgs {
  Dims d;
  const float* q;
  const float* k;
  const float* v;
  const float* dout;
  const float* lse;
  const float* delta;  // D [B,NH,T] = rowsum(dout ∘ out)
  const int32_t* docs;
  float* dq;
  float* dk;
  float* dv;
};

// The query tile a block of the forward or the dQ kernel owns: blockIdx.x walks (b, h) fastest and the
// tiles from the last to the first (the last tiles see the most keys: scheduled first).
struct QueryTile {
  int b, h, g, q0, q_valid;
  const int32_t* docs;  // this row's document ids, or nullptr
};
__device__ __forceinline__ QueryTile query_tile(const Dims& d, const int32_t* all_docs, int BQ) {
  const int nbh = d.B * d.NH, nqt = (d.T + BQ - 1) / BQ;
  const int qt = nqt - 1 - static_cast<int>(blockIdx.x) / nbh, bh = static_cast<int>(blockIdx.x) % nbh;
  QueryTile t;
  t.b = bh / d.NH, t.h = bh % d.NH, t.g = t.h / (d.NH / d.G);
  t.q0 = qt * BQ, t.q_valid = min(BQ, d.T - t.q0);
  t.docs = all_docs ? all_docs + int64_t(t.b) * d.T : nullptr;
  return t;
}

// The first (dir = -1) or last (dir = +1) position of the document run that holds `pos` in one batch
// row of doc ids (documents are contiguous runs, kernels/backend.h). Called by the whole block;
// scans a block-width of positions per step. s_edge: one shared int.
__device__ inline int doc_run_edge(const int32_t* docs, int T, int pos, int dir, int* s_edge) {
  const int32_t id = docs[pos];
  if (threadIdx.x == 0) *s_edge = dir < 0 ? -1 : INT_MAX;
  __syncthreads();
  for (int base = pos + dir;; base += dir * static_cast<int>(blockDim.x)) {
    const int p = base + dir * static_cast<int>(threadIdx.x);
    const bool edge = p < 0 || p >= T || docs[p] != id;
    if (edge) {
      if (dir < 0) atomicMax(s_edge, p + 1);  // the nearest edge below wins
      else atomicMin(s_edge, p - 1);          // the nearest edge above wins
    }
    if (__syncthreads_or(edge)) break;
  }
  const int result = *s_edge;
  __syncthreads();  // everyone has read s_edge before a later call resets it
  return result;
}

// Lets `kernel` use `bytes` of dynamic shared memory (opt-in above 48 KB), after checking the device
// allows it with the kernel's static shared memory on top.
template <typename Kernel>
void allow_smem(const Context& ctx, Kernel kernel, size_t bytes, const char* what) {
  int optin = 0;
  LMT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device));
  LMT_CHECK(bytes + 64 <= static_cast<size_t>(optin))
      << what << ": needs " << bytes << " bytes of shared memory per block, the device allows " << optin;
  if (bytes > 48 * 1024)
    LMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

inline Dims dims_of(const TensorView& q, const TensorView& k, float scale) {
  const int HD = static_cast<int>(q.dim(3));
  LMT_CHECK(cuda_math::attention_hd_bucket(HD) != 0)
      << "cuda attention supports head dims up to 256, got HD=" << HD;
  return Dims{static_cast<int>(q.dim(0)), static_cast<int>(q.dim(1)), static_cast<int>(q.dim(2)),
              static_cast<int>(k.dim(2)), HD, scale};
}

inline unsigned tile_blocks(int64_t tiles, int64_t per_tile) {
  const int64_t n = tiles * per_tile;
  LMT_CHECK(n > 0 && n <= INT_MAX) << "cuda attention: " << n << " blocks do not fit one grid";
  return static_cast<unsigned>(n);
}

// D[b,h,t] = Σ_e dout · out over each row, into delta [B,NH,T] f32.
void attention_delta_into(Context& ctx, const float* out, const float* dout, const Dims& d, float* delta);

// The bf16 tensor-core kernels (attention_fa2.cu): whether they cover this device and head dim
// (sm_80 or newer, HD <= 128), and the launches. The backward ignores `a.delta`: it makes D from
// `out` in the scratch it carves for its bf16 operands.
bool fa2_supported(const Context& ctx, int HD);
void fa2_forward(Context& ctx, const ForwardArgs& a);
void fa2_backward(Context& ctx, const BackwardArgs& a, const float* out);

}  // namespace lmt::kernels::cuda::attention_detail
