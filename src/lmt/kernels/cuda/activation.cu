// Pointwise activations (gelu tanh approximation, silu, relu) and gated linear units (kernels/backend.h),
// f32 only:
//   activation_forward:  out[i] = act(inp[i])                 (any rank, flat n = numel)
//   activation_backward: dinp[i] = dout[i] · act'(inp[i])     (overwrite)
//   glu_forward:  out[N,H] = act(inp[N, 0:H]) · inp[N, H:2H]
//   glu_backward: dinp[N, 0:H] = dout·up·act'(gate), dinp[N, H:2H] = dout·act(gate)   (overwrite)
// The per-element math is math/activation_math.h (the host test runs it against the ref backend).
//
// The output (out, dinp) is f32 or bf16 (OutT float or uint16_t): bf16 is rounded by the same
// bf16_round as convert(), so the bits equal convert() of the f32 output (backend.h).
//
// Memory-bound: each element is read and written once. Grid-stride loops (any n); float4 loads and
// stores when every pointer is 16-byte aligned (and, for GLU, H % 4 == 0 so every row stays aligned),
// else scalar. Each thread reads an element before writing the same element, so out may alias inp
// (and dinp dout) in the flat ops.
#include <cstdint>
#include <type_traits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/activation_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

namespace cm = lmt::kernels::cuda_math;

static_assert(static_cast<int>(cm::Act::kGeluTanh) == static_cast<int>(Activation::kGeluTanh) &&
              static_cast<int>(cm::Act::kSilu) == static_cast<int>(Activation::kSilu) &&
              static_cast<int>(cm::Act::kRelu) == static_cast<int>(Activation::kRelu));

constexpr int kThreads = 256;

template <typename F>
void with_act(Activation a, F&& f) {
  switch (a) {
    case Activation::kGeluTanh:
      f(std::integral_constant<cm::Act, cm::Act::kGeluTanh>{});
      return;
    case Activation::kSilu:
      f(std::integral_constant<cm::Act, cm::Act::kSilu>{});
      return;
    case Activation::kRelu:
      f(std::integral_constant<cm::Act, cm::Act::kRelu>{});
      return;
  }
  LMT_CHECK(false) << "cuda: unknown activation " << static_cast<int>(a);
}

template <cm::Act A>
__device__ __forceinline__ float4 fwd4(float4 v) {
  return make_float4(cm::act_forward<A>(v.x), cm::act_forward<A>(v.y), cm::act_forward<A>(v.z),
                     cm::act_forward<A>(v.w));
}

template <cm::Act A, bool kVec, typename OutT>
__global__ void __launch_bounds__(kThreads) act_forward_kernel(OutT* out, const float* inp, int64_t n) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride)
      store4(out, i, fwd4<A>(reinterpret_cast<const float4*>(inp)[i]));
    tail = 4 * n4;
  }
  for (int64_t i = tail + first; i < n; i += stride) store_f(out, i, cm::act_forward<A>(inp[i]));
}

template <cm::Act A, bool kVec, typename OutT>
__global__ void __launch_bounds__(kThreads)
    act_backward_kernel(OutT* dinp, const float* dout, const float* inp, int64_t n) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      const float4 x = reinterpret_cast<const float4*>(inp)[i];
      const float4 d = reinterpret_cast<const float4*>(dout)[i];
      store4(dinp, i, make_float4(d.x * cm::act_grad<A>(x.x), d.y * cm::act_grad<A>(x.y), d.z * cm::act_grad<A>(x.z),
                                  d.w * cm::act_grad<A>(x.w)));
    }
    tail = 4 * n4;
  }
  for (int64_t i = tail + first; i < n; i += stride) store_f(dinp, i, dout[i] * cm::act_grad<A>(inp[i]));
}

// GLU: blockIdx.y strides rows, x-threads stride the H columns (in float4 units when kVec).
template <cm::Act A, bool kVec, typename OutT>
__global__ void __launch_bounds__(kThreads) glu_forward_kernel(OutT* out, const float* inp, int64_t N, int64_t H) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t H4 = H / 4;
  for (int64_t row = blockIdx.y; row < N; row += gridDim.y) {
    const float* gate = inp + row * 2 * H;
    const float* up = gate + H;
    OutT* o = out + row * H;
    if constexpr (kVec) {
      for (int64_t h = first; h < H4; h += stride) {
        const float4 g = reinterpret_cast<const float4*>(gate)[h];
        const float4 u = reinterpret_cast<const float4*>(up)[h];
        store4(o, h, make_float4(cm::glu_forward<A>(g.x, u.x), cm::glu_forward<A>(g.y, u.y),
                                 cm::glu_forward<A>(g.z, u.z), cm::glu_forward<A>(g.w, u.w)));
      }
    } else {
      for (int64_t h = first; h < H; h += stride) store_f(o, h, cm::glu_forward<A>(gate[h], up[h]));
    }
  }
}

template <cm::Act A, bool kVec, typename OutT>
__global__ void __launch_bounds__(kThreads)
    glu_backward_kernel(OutT* dinp, const float* dout, const float* inp, int64_t N, int64_t H) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t H4 = H / 4;
  for (int64_t row = blockIdx.y; row < N; row += gridDim.y) {
    const float* gate = inp + row * 2 * H;
    const float* up = gate + H;
    const float* d = dout + row * H;
    OutT* dgate = dinp + row * 2 * H;
    OutT* dup = dgate + H;
    if constexpr (kVec) {
      for (int64_t h = first; h < H4; h += stride) {
        const float4 g = reinterpret_cast<const float4*>(gate)[h];
        const float4 u = reinterpret_cast<const float4*>(up)[h];
        const float4 dd = reinterpret_cast<const float4*>(d)[h];
        float4 dg, du;
        cm::glu_backward<A>(g.x, u.x, dd.x, dg.x, du.x);
        cm::glu_backward<A>(g.y, u.y, dd.y, dg.y, du.y);
        cm::glu_backward<A>(g.z, u.z, dd.z, dg.z, du.z);
        cm::glu_backward<A>(g.w, u.w, dd.w, dg.w, du.w);
        store4(dgate, h, dg);
        store4(dup, h, du);
      }
    } else {
      for (int64_t h = first; h < H; h += stride) {
        float dg, du;
        cm::glu_backward<A>(gate[h], up[h], d[h], dg, du);
        store_f(dgate, h, dg);
        store_f(dup, h, du);
      }
    }
  }
}

dim3 glu_grid(int64_t N, int64_t cols) {
  const unsigned x = blocks_for(cols, kThreads, 1024);
  const unsigned y = static_cast<unsigned>(N < 65535 ? N : 65535);
  return dim3(x, y);
}

}  // namespace

void activation_forward(Context& ctx, Activation act, const TensorView& out, const TensorView& inp) {
  const int64_t n = inp.numel();
  if (n == 0) return;
  const float* x = dptr<const float>(inp);
  with_out(out, [&](auto* o) {
    using OutT = std::remove_pointer_t<decltype(o)>;
    const bool vec = aligned_out(o) && aligned(x, 16);
    with_act(act, [&](auto a) {
      constexpr cm::Act A = decltype(a)::value;
      if (vec)
        act_forward_kernel<A, true, OutT><<<blocks_for(n / 4 + 1, kThreads), kThreads, 0, ctx.stream>>>(o, x, n);
      else
        act_forward_kernel<A, false, OutT><<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(o, x, n);
      LMT_CUDA_LAUNCHED();
    });
  });
}

void activation_backward(Context& ctx, Activation act, const TensorView& dinp, const TensorView& dout,
                         const TensorView& inp) {
  const int64_t n = inp.numel();
  if (n == 0) return;
  const float* dy = dptr<const float>(dout);
  const float* x = dptr<const float>(inp);
  with_out(dinp, [&](auto* dx) {
    using OutT = std::remove_pointer_t<decltype(dx)>;
    const bool vec = aligned_out(dx) && aligned(dy, 16) && aligned(x, 16);
    with_act(act, [&](auto a) {
      constexpr cm::Act A = decltype(a)::value;
      if (vec)
        act_backward_kernel<A, true, OutT><<<blocks_for(n / 4 + 1, kThreads), kThreads, 0, ctx.stream>>>(dx, dy, x, n);
      else
        act_backward_kernel<A, false, OutT><<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(dx, dy, x, n);
      LMT_CUDA_LAUNCHED();
    });
  });
}

void glu_forward(Context& ctx, Activation act, const TensorView& out, const TensorView& inp) {
  const int64_t N = out.dim(0), H = out.dim(1);
  if (N == 0 || H == 0) return;
  const float* x = dptr<const float>(inp);
  with_out(out, [&](auto* o) {
    using OutT = std::remove_pointer_t<decltype(o)>;
    const bool vec = H % 4 == 0 && aligned_out(o) && aligned(x, 16);
    with_act(act, [&](auto a) {
      constexpr cm::Act A = decltype(a)::value;
      if (vec)
        glu_forward_kernel<A, true, OutT><<<glu_grid(N, H / 4), kThreads, 0, ctx.stream>>>(o, x, N, H);
      else
        glu_forward_kernel<A, false, OutT><<<glu_grid(N, H), kThreads, 0, ctx.stream>>>(o, x, N, H);
      LMT_CUDA_LAUNCHED();
    });
  });
}

void glu_backward(Context& ctx, Activation act, const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  const int64_t N = dout.dim(0), H = dout.dim(1);
  if (N == 0 || H == 0) return;
  const float* dy = dptr<const float>(dout);
  const float* x = dptr<const float>(inp);
  with_out(dinp, [&](auto* dx) {
    using OutT = std::remove_pointer_t<decltype(dx)>;
    const bool vec = H % 4 == 0 && aligned_out(dx) && aligned(dy, 16) && aligned(x, 16);
    with_act(act, [&](auto a) {
      constexpr cm::Act A = decltype(a)::value;
      if (vec)
        glu_backward_kernel<A, true, OutT><<<glu_grid(N, H / 4), kThreads, 0, ctx.stream>>>(dx, dy, x, N, H);
      else
        glu_backward_kernel<A, false, OutT><<<glu_grid(N, H), kThreads, 0, ctx.stream>>>(dx, dy, x, N, H);
      LMT_CUDA_LAUNCHED();
    });
  });
}

}  // namespace lmt::kernels::cuda
