// The mixture-of-experts ops on the GPU (kernels/backend.h), f32 (f64, the ref oracle's dtype, is
// refused like every cuda op's):
//   moe_router_forward/backward: one thread per row, math/moe_math.h in f64 as the host loops;
//   moe_gather_rows:             out[r, :] = inp[rows[r], :] for f32 and bf16 rows;
//   moe_scatter_add_rows:        embedding_backward's deterministic sorted runs (embedding.cu), which
//                                is the same sum: dinp[rows[r], :] += dout[r, :];
//   moe_combine_forward:         one thread per output element, Σ_k in f64 in slot order;
//   moe_combine_backward:        d y one thread per (slot, column); d weights one warp per slot, 32 lane
//                                partials in f64 and a butterfly (deterministic).
// No float atomics: the same inputs give the same bits every run. Row ids a kernel cannot trust (the
// device cannot report them) are guarded: a gathered row outside [0, N) reads as NaN, a combine slot
// outside [0, R) counts as dropped.
#include <cmath>
#include <cstdint>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/moe_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

namespace cm = cuda_math;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    router_forward_kernel(float* weights, int32_t* experts, float* probs, float* lse, const float* logits,
                          const float* bias, bool renormalize, int64_t N, int64_t E, int64_t K) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    cm::moe_router_row_forward(logits + n * E, bias, E, K, renormalize, probs + n * E, lse + n, experts + n * K,
                               weights + n * K);
}

__global__ void __launch_bounds__(kThreads)
    router_backward_kernel(float* dlogits, const float* dweights, const float* probs, const float* lse,
                           const int32_t* experts, bool renormalize, const float* dprobs, double z_scale, int64_t N,
                           int64_t E, int64_t K) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < N;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    cm::moe_router_row_backward(probs + n * E, lse[n], experts + n * K, dweights + n * K, dprobs, z_scale, renormalize,
                                E, K, dlogits + n * E);
}

template <typename T>
__device__ __forceinline__ T nan_of() {
  if constexpr (sizeof(T) == 2) return T(0x7FC0);  // bf16 quiet NaN
  else return NAN;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(T* out, const T* inp, const int32_t* rows, int64_t R, int64_t N, int64_t F) {
  for (int64_t r = blockIdx.y; r < R; r += gridDim.y) {
    const int64_t src = rows[r];
    const bool valid = src >= 0 && src < N;
    for (int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < F;
         f += static_cast<int64_t>(gridDim.x) * blockDim.x)
      out[r * F + f] = valid ? inp[src * F + f] : nan_of<T>();
  }
}

__global__ void __launch_bounds__(kThreads)
    combine_forward_kernel(float* out, const float* y, const float* weights, const int32_t* slots, int64_t N,
                           int64_t K, int64_t R, int64_t F) {
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y)
    for (int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < F;
         f += static_cast<int64_t>(gridDim.x) * blockDim.x)
      out[n * F + f] = cm::moe_combine_element(y, weights + n * K, slots + n * K, K, R, F, f);
}

// dy[slots[n,k], f] = weights[n,k] · dout[n, f]; a row of y no slot names is left as it is.
__global__ void __launch_bounds__(kThreads)
    combine_backward_dy_kernel(float* dy, const float* dout, const float* weights, const int32_t* slots, int64_t NK,
                               int64_t K, int64_t R, int64_t F) {
  for (int64_t s = blockIdx.y; s < NK; s += gridDim.y) {
    const int64_t r = slots[s];
    if (r < 0 || r >= R) continue;
    const double w = static_cast<double>(weights[s]);
    const float* d = dout + (s / K) * F;
    for (int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < F;
         f += static_cast<int64_t>(gridDim.x) * blockDim.x)
      dy[r * F + f] = static_cast<float>(w * static_cast<double>(d[f]));
  }
}

// dweights[n,k] = dout[n] · y[slots[n,k]] (0 for a dropped slot): one warp per slot.
__global__ void __launch_bounds__(kThreads)
    combine_backward_dw_kernel(float* dweights, const float* dout, const float* y, const int32_t* slots, int64_t NK,
                               int64_t K, int64_t R, int64_t F) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); s < NK; s += warps) {
    const int64_t r = slots[s];
    double acc = 0;
    if (r >= 0 && r < R) acc = cm::moe_dot_partial(dout + (s / K) * F, y + r * F, F, lane, 32);
    acc = warp_sum(acc);
    if (lane == 0) dweights[s] = static_cast<float>(acc);
  }
}

dim3 rows_grid(int64_t rows, int64_t cols) {
  return dim3(blocks_for(cols, kThreads, 64), static_cast<unsigned>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535));
}

}  // namespace

void moe_router_forward(Context& ctx, const TensorView& weights, const TensorView& experts, const TensorView& probs,
                        const TensorView& lse, const TensorView& logits, const TensorView& bias, bool renormalize) {
  const int64_t N = logits.dim(0), E = logits.dim(1), K = weights.dim(1);
  if (N == 0) return;
  router_forward_kernel<<<blocks_for(N, kThreads), kThreads, 0, ctx.stream>>>(
      dptr<float>(weights), dptr<int32_t>(experts), dptr<float>(probs), dptr<float>(lse), dptr<const float>(logits),
      dptr<const float>(bias), renormalize, N, E, K);
  LMT_CUDA_LAUNCHED();
}

void moe_router_backward(Context& ctx, const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                         const TensorView& lse, const TensorView& experts, bool renormalize, const TensorView& dprobs,
                         double z_scale) {
  const int64_t N = probs.dim(0), E = probs.dim(1), K = dweights.dim(1);
  if (N == 0) return;
  router_backward_kernel<<<blocks_for(N, kThreads), kThreads, 0, ctx.stream>>>(
      dptr<float>(dlogits), dptr<const float>(dweights), dptr<const float>(probs), dptr<const float>(lse),
      dptr<const int32_t>(experts), renormalize, dptr<const float>(dprobs), z_scale, N, E, K);
  LMT_CUDA_LAUNCHED();
}

void moe_gather_rows(Context& ctx, const TensorView& out, const TensorView& inp, const TensorView& rows) {
  const int64_t R = rows.dim(0), N = inp.dim(0), F = inp.dim(1);
  if (R == 0 || F == 0) return;
  const dim3 grid = rows_grid(R, F);
  const int32_t* r = dptr<const int32_t>(rows);
  if (is_bf16(inp)) {
    gather_rows_kernel<uint16_t><<<grid, kThreads, 0, ctx.stream>>>(dptr<uint16_t>(out), dptr<const uint16_t>(inp), r,
                                                                    R, N, F);
  } else {
    gather_rows_kernel<float><<<grid, kThreads, 0, ctx.stream>>>(dptr<float>(out), dptr<const float>(inp), r, R, N, F);
  }
  LMT_CUDA_LAUNCHED();
}

void moe_combine_forward(Context& ctx, const TensorView& out, const TensorView& y, const TensorView& weights,
                         const TensorView& slots) {
  const int64_t N = out.dim(0), F = out.dim(1), K = weights.dim(1), R = y.dim(0);
  if (N == 0 || F == 0) return;
  combine_forward_kernel<<<rows_grid(N, F), kThreads, 0, ctx.stream>>>(
      dptr<float>(out), dptr<const float>(y), dptr<const float>(weights), dptr<const int32_t>(slots), N, K, R, F);
  LMT_CUDA_LAUNCHED();
}

void moe_combine_backward(Context& ctx, const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                          const TensorView& y, const TensorView& weights, const TensorView& slots) {
  const int64_t N = dout.dim(0), F = dout.dim(1), K = weights.dim(1), R = y.dim(0), NK = N * K;
  if (NK == 0) return;
  const int32_t* s = dptr<const int32_t>(slots);
  if (F > 0) {
    combine_backward_dy_kernel<<<rows_grid(NK, F), kThreads, 0, ctx.stream>>>(
        dptr<float>(dy), dptr<const float>(dout), dptr<const float>(weights), s, NK, K, R, F);
    LMT_CUDA_LAUNCHED();
  }
  combine_backward_dw_kernel<<<blocks_for(NK, kThreads / 32), kThreads, 0, ctx.stream>>>(
      dptr<float>(dweights), dptr<const float>(dout), dptr<const float>(y), s, NK, K, R, F);
  LMT_CUDA_LAUNCHED();
}

}  // namespace lmt::kernels::cuda
