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
// Two kernels: the first computes the (cos, sin) pair of each row's position and each frequency once,
// cs[N, half] as f64 (one per row, not per head: the heads share it); the second, one thread per work
// item of a head (rotary_dim/2 pair items, then HD - rotary_dim pass-through items, skipped when out
// aliases inp), rotates with the table, in a grid-stride loop over N·NH·items (any shape; 32-bit
// index arithmetic when that count fits). The f64 trigonometry dominated a kernel that computed it
// per head (docs/CUDA.md).
// The frequencies reach the device as the table kernel's argument (up to 128 of them: no copy, no
// staging), else through a copy into scratch. Scratch (one call): that copy where needed and the
// (cos, sin) table (N · half · 16 bytes: 4 MB for 8192 rows of 32 pairs).
#include <cstdint>
#include <limits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/rope_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

namespace cm = lmt::kernels::cuda_math;

constexpr int kThreads = 256;

// Up to this many frequencies travel to the table kernel as its argument (HD <= 256: every head the
// attention kernels take); more go through a copy into scratch.
constexpr int kArgFreqs = 128;
struct FreqArg {
  double v[kArgFreqs];
};

// cs[n·half + j] = scaled (cos, sin) of positions[n]·inv_freq[j] (negated angle when inverse);
// inv_freq from `copied` when given, else from `arg`.
__global__ void __launch_bounds__(kThreads)
    rope_table_kernel(double2* cs, const int32_t* positions, FreqArg arg, const double* copied, int64_t N,
                      int64_t half, double scaling, bool inverse) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < N * half;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / half, j = idx - n * half;
    double c, s;
    cm::rope_cos_sin(static_cast<double>(positions[n]), copied != nullptr ? copied[j] : arg.v[j], scaling, inverse,
                     c, s);
    cs[idx] = make_double2(c, s);
  }
}

// Index is uint32_t when N·NH·items fits in it (cheaper division), else int64_t.
template <typename Index>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(float* out, const float* inp, const double2* cs, Index N, Index NH, Index HD, Index half) {
  const Index items = HD - half;  // half pairs + (HD - 2·half) pass-through dims
  const Index total = N * NH * items;
  const bool copy_tail = out != inp;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index head_row = idx / items;  // n·NH + h
    const Index j = idx - head_row * items;
    const int64_t base = static_cast<int64_t>(head_row) * HD;
    if (j < half) {
      const double2 t = cs[static_cast<int64_t>(head_row / NH) * half + j];
      float o1, o2;
      cm::rope_rotate(inp[base + j], inp[base + j + half], t.x, t.y, o1, o2);
      out[base + j] = o1;
      out[base + j + half] = o2;
    } else if (copy_tail) {
      const Index i = j + half;  // in [2·half, HD)
      out[base + i] = inp[base + i];
    }
  }
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

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
  const bool by_arg = half <= kArgFreqs;
  const size_t freq_bytes = by_arg ? 0 : align256(static_cast<size_t>(half) * sizeof(double));
  char* sc = static_cast<char*>(ctx.scratch(freq_bytes + static_cast<size_t>(N * half) * sizeof(double2)));
  double2* cs = reinterpret_cast<double2*>(sc + freq_bytes);
  FreqArg arg{};
  double* copied = nullptr;
  if (by_arg) {
    for (int64_t j = 0; j < half; ++j) arg.v[j] = freqs.inv_freq[static_cast<size_t>(j)];
  } else {
    // From pageable memory: returns once the source is staged, so the vector may be a temporary.
    copied = reinterpret_cast<double*>(sc);
    LMT_CUDA_CHECK(cudaMemcpyAsync(copied, freqs.inv_freq.data(), static_cast<size_t>(half) * sizeof(double),
                                   cudaMemcpyHostToDevice, ctx.stream));
  }
  rope_table_kernel<<<blocks_for(N * half, kThreads), kThreads, 0, ctx.stream>>>(
      cs, pos, arg, copied, N, half, freqs.attention_scaling, inverse);
  LMT_CUDA_LAUNCHED();
  const int64_t total = N * NH * (HD - half);
  if (total < (int64_t{1} << 31))
    rope_kernel<uint32_t><<<blocks_for(total, kThreads), kThreads, 0, ctx.stream>>>(
        o, x, cs, static_cast<uint32_t>(N), static_cast<uint32_t>(NH), static_cast<uint32_t>(HD),
        static_cast<uint32_t>(half));
  else
    rope_kernel<int64_t><<<blocks_for(total, kThreads), kThreads, 0, ctx.stream>>>(o, x, cs, N, NH, HD, half);
  LMT_CUDA_LAUNCHED();
}

}  // namespace lmt::kernels::cuda
