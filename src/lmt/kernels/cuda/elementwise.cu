// Flat-span ops: add, convert, sum of squares, scale, axpby and the AdamW update (ops.h).
// Every kernel is a grid-stride loop over n elements; reductions are deterministic (fixed grid,
// fixed tree, partials summed in order on one block).
#include <cuda_runtime.h>

#include <cmath>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/adamw_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

#define LMT_GRID_STRIDE(i, n) \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  LMT_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

// The same sums four at a time (16-byte accesses) where every pointer is 16-byte aligned and n % 4 == 0.
__global__ void add_x4_kernel(float4* out, const float4* a, const float4* b, int64_t n4) {
  LMT_GRID_STRIDE(i, n4) {
    const float4 x = a[i], y = b[i];
    out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

__global__ void scale_x4_kernel(float4* x, float s, int64_t n4) {
  LMT_GRID_STRIDE(i, n4) {
    const float4 v = x[i];
    x[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
  }
}

__global__ void f32_to_bf16_kernel(uint16_t* out, const float* in, int64_t n) {
  LMT_GRID_STRIDE(i, n) out[i] = cuda_math::bf16_round(in[i]);
}

// Four elements a thread (16-byte loads, 8-byte stores) where both pointers allow it and n % 4 == 0:
// a conversion is pure memory traffic, and the scalar kernel's 2-byte stores leave bandwidth unused.
__global__ void f32_to_bf16_x4_kernel(uint2* out, const float4* in, int64_t n4) {
  LMT_GRID_STRIDE(i, n4) {
    out[i] = bf16x4(in[i]);
  }
}

__global__ void bf16_to_f32_x4_kernel(float4* out, const uint2* in, int64_t n4) {
  LMT_GRID_STRIDE(i, n4) {
    const uint2 x = in[i];
    out[i] = make_float4(cuda_math::bf16_to_f32(uint16_t(x.x & 0xffffu)), cuda_math::bf16_to_f32(uint16_t(x.x >> 16)),
                         cuda_math::bf16_to_f32(uint16_t(x.y & 0xffffu)), cuda_math::bf16_to_f32(uint16_t(x.y >> 16)));
  }
}

bool aligned_x4(const void* out, const void* in, int64_t n, uintptr_t out_align, uintptr_t in_align) {
  return n % 4 == 0 && aligned(out, out_align) && aligned(in, in_align);
}

__global__ void bf16_to_f32_kernel(float* out, const uint16_t* in, int64_t n) {
  LMT_GRID_STRIDE(i, n) out[i] = cuda_math::bf16_to_f32(in[i]);
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  LMT_GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void axpby_kernel(float* out, float alpha, const float* x, float beta, const float* y, uint16_t* out16,
                             int64_t n) {
  LMT_GRID_STRIDE(i, n) {
    const float r = alpha * x[i] + beta * y[i];
    out[i] = r;
    if (out16 != nullptr) out16[i] = cuda_math::bf16_round(r);
  }
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, uint16_t* w16,
                             cuda_math::AdamWConsts c, int64_t n) {
  LMT_GRID_STRIDE(i, n) {
    float wi = w[i], mi = m[i], vi = v[i];
    cuda_math::adamw_element(c, g[i], wi, mi, vi);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (w16 != nullptr) w16[i] = cuda_math::bf16_round(wi);
  }
}

// Four elements a thread (16-byte loads and stores, 8-byte bf16 stores) where every pointer allows it
// and n % 4 == 0: the update is pure memory traffic (30 bytes an element), bound by bandwidth. Each
// element's math is the scalar kernel's, so both give the same bits.
__global__ void adamw_x4_kernel(float4* w, const float4* g, float4* m, float4* v, uint2* w16, cuda_math::AdamWConsts c,
                                int64_t n4) {
  LMT_GRID_STRIDE(i, n4) {
    float4 wi = w[i], mi = m[i], vi = v[i];
    const float4 gi = g[i];
    cuda_math::adamw_element(c, gi.x, wi.x, mi.x, vi.x);
    cuda_math::adamw_element(c, gi.y, wi.y, mi.y, vi.y);
    cuda_math::adamw_element(c, gi.z, wi.z, mi.z, vi.z);
    cuda_math::adamw_element(c, gi.w, wi.w, mi.w, vi.w);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (w16 != nullptr) w16[i] = bf16x4(wi);
  }
}

// Σ x² per block (f64 accumulation of f32 squares), then one block sums the partials in order.
template <typename T>
__global__ void sum_squares_partial_kernel(double* partial, const T* x, int64_t n) {
  __shared__ double sh[32];
  double s = 0.0;
  LMT_GRID_STRIDE(i, n) {
    const double v = static_cast<double>(load_f(x, i));
    s += v * v;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(double* result, const double* partial, int parts) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) s += partial[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *result = s;
}

}  // namespace

void add(Context& ctx, const TensorView& out, const TensorView& a, const TensorView& b) {
  const int64_t n = out.numel();
  float* o = dptr<float>(out);
  const float* x = dptr<const float>(a);
  const float* y = dptr<const float>(b);
  if (aligned_x4(o, x, n, 16, 16) && aligned(y, 16))
    add_x4_kernel<<<blocks_for(n / 4, kThreads), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<float4*>(o), reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(y), n / 4);
  else
    add_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(o, x, y, n);
  LMT_CUDA_LAUNCHED();
}

void convert(Context& ctx, const TensorView& out, const TensorView& inp) {
  const int64_t n = out.numel();
  if (out.dtype() == inp.dtype()) {
    copy(ctx, out, inp);
  } else if (out.dtype() == DType::kBF16 && inp.dtype() == DType::kF32) {
    uint16_t* o = dptr<uint16_t>(out);
    const float* in = dptr<const float>(inp);
    if (aligned_x4(o, in, n, 8, 16))
      f32_to_bf16_x4_kernel<<<blocks_for(n / 4, kThreads), kThreads, 0, ctx.stream>>>(
          reinterpret_cast<uint2*>(o), reinterpret_cast<const float4*>(in), n / 4);
    else
      f32_to_bf16_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(o, in, n);
    LMT_CUDA_LAUNCHED();
  } else if (out.dtype() == DType::kF32 && inp.dtype() == DType::kBF16) {
    float* o = dptr<float>(out);
    const uint16_t* in = dptr<const uint16_t>(inp);
    if (aligned_x4(o, in, n, 16, 8))
      bf16_to_f32_x4_kernel<<<blocks_for(n / 4, kThreads), kThreads, 0, ctx.stream>>>(
          reinterpret_cast<float4*>(o), reinterpret_cast<const uint2*>(in), n / 4);
    else
      bf16_to_f32_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(o, in, n);
    LMT_CUDA_LAUNCHED();
  } else {
    LMT_CHECK(false) << "cuda convert: " << inp.to_string() << " -> " << out.to_string()
                     << " is not supported (f32 <-> bf16 only; f64 is the ref backend's)";
  }
}

double sum_squares(Context& ctx, const TensorView& x) {
  const int64_t n = x.numel();
  // A fixed grid (not one derived from the device) keeps the result identical on every GPU.
  const int parts = static_cast<int>(blocks_for(n, kThreads, 1024));
  double* partial = static_cast<double*>(ctx.scratch(static_cast<size_t>(parts + 1) * sizeof(double)));
  if (is_bf16(x)) {
    sum_squares_partial_kernel<uint16_t><<<parts, kThreads, 0, ctx.stream>>>(partial, dptr<const uint16_t>(x), n);
  } else {
    sum_squares_partial_kernel<float><<<parts, kThreads, 0, ctx.stream>>>(partial, dptr<const float>(x), n);
  }
  LMT_CUDA_LAUNCHED();
  sum_partials_kernel<<<1, 1024, 0, ctx.stream>>>(partial + parts, partial, parts);
  LMT_CUDA_LAUNCHED();
  return read_back(ctx, partial + parts);
}

void scale(Context& ctx, const TensorView& x, float s) {
  const int64_t n = x.numel();
  float* p = dptr<float>(x);
  if (n % 4 == 0 && aligned(p, 16))
    scale_x4_kernel<<<blocks_for(n / 4, kThreads), kThreads, 0, ctx.stream>>>(reinterpret_cast<float4*>(p), s, n / 4);
  else
    scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(p, s, n);
  LMT_CUDA_LAUNCHED();
}

void axpby(Context& ctx, const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
           const TensorView& out_bf16) {
  const int64_t n = out.numel();
  axpby_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(
      dptr<float>(out), alpha, dptr<const float>(x), beta, dptr<const float>(y), dptr<uint16_t>(out_bf16), n);
  LMT_CUDA_LAUNCHED();
}

void adamw_update(Context& ctx, const TensorView& param, const TensorView& grad, const TensorView& m,
                  const TensorView& v, const TensorView& param_bf16, const AdamWParams& p) {
  const int64_t n = param.numel();
  cuda_math::AdamWConsts c;
  c.lr = p.lr, c.beta1 = p.beta1, c.beta2 = p.beta2, c.eps = p.eps, c.weight_decay = p.weight_decay;
  c.grad_scale = p.grad_scale;
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  c.inv_bc1 = static_cast<float>(1.0 / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  float* w = dptr<float>(param);
  const float* g = dptr<const float>(grad);
  float* mp = dptr<float>(m);
  float* vp = dptr<float>(v);
  uint16_t* w16 = dptr<uint16_t>(param_bf16);
  if (aligned_x4(w, g, n, 16, 16) && aligned(mp, 16) && aligned(vp, 16) && aligned(w16, 8)) {
    adamw_x4_kernel<<<blocks_for(n / 4, kThreads), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<float4*>(w), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(mp),
        reinterpret_cast<float4*>(vp), reinterpret_cast<uint2*>(w16), c, n / 4);
  } else {
    adamw_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(w, g, mp, vp, w16, c, n);
  }
  LMT_CUDA_LAUNCHED();
}

}  // namespace lmt::kernels::cuda
