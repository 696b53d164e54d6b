// Helpers shared by the .cu files of kernels/cuda: error checks, launch sizes, typed device pointers,
// element loads/stores for f32 and bf16, and deterministic block reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lmt/base/check.h"
#include "lmt/kernels/cuda/context.h"
#include "lmt/kernels/cuda/math/bf16_math.h"
#include "lmt/tensor/tensor_view.h"

// Stops the process with the failing call, its error and where (a device error is never user input:
// the backend's callers validated shapes; what remains is a bug or a broken device).
#define LMT_CUDA_CHECK(expr)                                                                       \
  do {                                                                                             \
    cudaError_t lmt_cuda_err_ = (expr);                                                            \
    LMT_CHECK(lmt_cuda_err_ == cudaSuccess)                                                        \
        << #expr << ": " << cudaGetErrorName(lmt_cuda_err_) << " (" << cudaGetErrorString(lmt_cuda_err_) << ")"; \
  } while (0)

// After a kernel launch: a bad launch configuration is reported here, not at the next sync.
#define LMT_CUDA_LAUNCHED() LMT_CUDA_CHECK(cudaGetLastError())

namespace lmt::kernels::cuda {

// Copies one value from device memory to the host (through the context's pinned buffer) and waits
// for it: how the reductions that return a value to the host end.
template <typename T>
T read_back(Context& ctx, const T* device_value) {
  T* host = static_cast<T*>(ctx.pinned(sizeof(T)));
  LMT_CUDA_CHECK(cudaMemcpyAsync(host, device_value, sizeof(T), cudaMemcpyDeviceToHost, ctx.stream));
  ctx.sync();
  return *host;
}

// The device pointer of a view (nullptr for an absent one). Checks the view lives on a CUDA device
// and has element type T's dtype (uint16_t stands for bf16).
template <typename T>
T* dptr(const TensorView& v) {
  if (!v.present()) return nullptr;
  LMT_CHECK(v.device().kind() == Device::Kind::kCuda)
      << "the cuda backend got a tensor in host memory: " << v.to_string()
      << " (hint: allocate it with the backend's allocator(), or copy it over with Backend::copy)";
  if constexpr (std::is_same_v<T, uint16_t> || std::is_same_v<T, const uint16_t>) {
    LMT_CHECK(v.dtype() == DType::kBF16) << "expected bf16, got " << v.to_string();
  } else {
    LMT_CHECK(v.dtype() == dtype_of<std::remove_const_t<T>>()) << "unexpected dtype " << v.to_string();
  }
  return static_cast<T*>(v.data());
}

// The cuda backend computes in f32 and bf16 (f64 is the ref oracle's).
inline bool is_bf16(const TensorView& v) { return v.dtype() == DType::kBF16; }

// Whether p is a multiple of `bytes` (the vector kernels' 16-byte float4 and 8-byte bf16x4 accesses).
inline bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

inline unsigned blocks_for(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

// Typed element access: float stays float; uint16_t holds bf16 bits.
__device__ __forceinline__ float load_f(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f(const uint16_t* p, int64_t i) { return cuda_math::bf16_to_f32(p[i]); }
__device__ __forceinline__ void store_f(float* p, int64_t i, float x) { p[i] = x; }
__device__ __forceinline__ void store_f(uint16_t* p, int64_t i, float x) { p[i] = cuda_math::bf16_round(x); }
// Four floats rounded to bf16 as one 8-byte word, the first in the lowest half (convert()'s rounding).
__device__ __forceinline__ uint2 bf16x4(float4 v) {
  return make_uint2(uint32_t(cuda_math::bf16_round(v.x)) | (uint32_t(cuda_math::bf16_round(v.y)) << 16),
                    uint32_t(cuda_math::bf16_round(v.z)) | (uint32_t(cuda_math::bf16_round(v.w)) << 16));
}

// Outputs of f32 or bf16 (the activation and norm ops' `out`, backend.h): four at once, 16 bytes of
// f32 or 8 of bf16 (aligned_out says whether p allows it); with_out calls f(pointer) with t's data
// as float* or uint16_t* (bf16).
inline bool aligned_out(const float* p) { return aligned(p, 16); }
inline bool aligned_out(const uint16_t* p) { return aligned(p, 8); }
__device__ __forceinline__ void store4(float* p, int64_t i4, float4 v) { reinterpret_cast<float4*>(p)[i4] = v; }
__device__ __forceinline__ void store4(uint16_t* p, int64_t i4, float4 v) {
  reinterpret_cast<uint2*>(p)[i4] = bf16x4(v);
}
template <typename F>
void with_out(const TensorView& t, F&& f) {
  if (is_bf16(t)) f(dptr<uint16_t>(t));
  else f(dptr<float>(t));
}

// Sum / max over groups of `Lanes` consecutive lanes (32: the warp; 16: each half-warp, since xor
// offsets below 16 never cross a half); every lane of a group gets its group's result.
template <int Lanes = 32, typename T>
__device__ __forceinline__ T warp_sum(T x) {
  for (int o = Lanes / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <int Lanes = 32>
__device__ __forceinline__ float warp_max(float x) {
  for (int o = Lanes / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// Deterministic: a fixed tree for a fixed blockDim. `shared` holds at least 32 values.
template <typename T>
__device__ __forceinline__ T block_sum(T x, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  total = warp_sum(total);
  return total;
}

}  // namespace lmt::kernels::cuda
