// Rotary position embedding, Hugging Face rotate-half layout (kernels/backend.h): x[N,NH,HD] f32,
// positions[N] i32 (>= 0), freqs.inv_freq[rotary_dim/2] (host f64). For each head, pair
// (i, i + rotary_dim/2), i < rotary_dim/2, is rotated by pos·inv_freq[i] (negated when `inverse`,
// the transpose used for gradients) and scaled by attention_scaling; dims [rotary_dim, HD) pass
// through unscaled. out may alias inp (each thread reads its pair before writing it).
//
// Accuracy: like the ref backend, the angle, cos, sin, scaling and rotation are f64 (math/rope_math.h),
// so the result matches ref to f32 rounding even at positions in the hundreds of thousands, where an
// f32 angle would be off by whole radians' worth of ulps.
//
// One thread per work item of a head: rotary_dim/2 pair items, then HD - rotary_dim pass-through
// items (skipped when out aliases inp); a grid-stride loop over N·NH·items (any shape).
// Scratch: the inv_freq table as f64, copied from the host on ctx.stream (rotary_dim/2 · 8 bytes).
#include <cstdint>
#include <limits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/rope_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

namespace cm = lmt::kernels::cuda_math;

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rope_kernel(float* out, const float* inp, const int32_t* positions, const double* inv_freq, int64_t N, int64_t NH,
                int64_t HD, int64_t half, double scaling, bool inverse) {
  const int64_t items = HD - half;  // half pairs + (HD - 2·half) pass-through dims
  const int64_t total = N * NH * items;
  const bool copy_tail = out != inp;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t head_row = idx / items;  // n·NH + h
    const int64_t j = idx - head_row * items;
    const int64_t base = head_row * HD;
    if (j < half) {
      const int64_t n = head_row / NH;
      double c, s;
      cm::rope_cos_sin(static_cast<double>(positions[n]), inv_freq[j], scaling, inverse, c, s);
      float o1, o2;
      cm::rope_rotate(inp[base + j], inp[base + j + half], c, s, o1, o2);
      out[base + j] = o1;
      out[base + j + half] = o2;
    } else if (copy_tail) {
      const int64_t i = j + half;  // in [2·half, HD)
      out[base + i] = inp[base + i];
    }
  }
}

}  // namespace

void rope(Context& ctx, const TensorView& out, const TensorView& inp, const TensorView& positions,
          const RopeFreqs& freqs, bool inverse) {
  const int64_t N = inp.dim(0), NH = inp.dim(1), HD = inp.dim(2);
  const int64_t half = static_cast<int64_t>(freqs.inv_freq.size());
  LMT_CHECK(2 * half <= HD && half > 0) << "cuda rope: rotary_dim " << 2 * half << " vs HD " << HD;
  float* o = dptr<float>(out);
  const float* x = dptr<const float>(inp);
  const int32_t* pos = dptr<const int32_t>(positions);
  if (N == 0 || NH == 0) return;
  LMT_CHECK(N <= std::numeric_limits<int64_t>::max() / (NH * HD)) << "cuda rope: shape too large";
  // cudaMemcpyAsync from pageable memory returns once the source has been staged, so the table may
  // be a temporary; the kernel after it on the stream sees the copy.
  double* table = static_cast<double*>(ctx.scratch(static_cast<size_t>(half) * sizeof(double)));
  LMT_CUDA_CHECK(cudaMemcpyAsync(table, freqs.inv_freq.data(), static_cast<size_t>(half) * sizeof(double),
                                 cudaMemcpyHostToDevice, ctx.stream));
  const int64_t total = N * NH * (HD - half);
  rope_kernel<<<blocks_for(total, kThreads), kThreads, 0, ctx.stream>>>(o, x, pos, table, N, NH, HD, half,
                                                                        freqs.attention_scaling, inverse);
  LMT_CUDA_LAUNCHED();
}

}  // namespace lmt::kernels::cuda
