// Fills, copies and the small reductions of a step (ops.h): the ops that keep host loops out of model
// code, run where the memory is.
#include <cuda_runtime.h>

#include <cstring>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = value;
}

__global__ void positions_kernel(int32_t* out, const int32_t* given, int64_t T, int64_t n, int32_t* bad) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (given == nullptr) {
      out[i] = static_cast<int32_t>(i % T);
    } else {
      const int32_t p = given[i];
      if (p < 0 || p >= T) atomicMin(bad, static_cast<int32_t>(i < 0x7fffffff ? i : 0x7fffffff));
      out[i] = p;
    }
  }
}

// Counts targets != ignore: per-block counts, summed in order by one block.
__global__ void count_kernel(int64_t* partial, const int32_t* t, int32_t ignore, int64_t n) {
  __shared__ double sh[32];
  double c = 0;  // exact for any count below 2^53
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    c += t[i] != ignore ? 1.0 : 0.0;
  c = block_sum(c, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = static_cast<int64_t>(c);
}

__global__ void count_total_kernel(int64_t* out, const int64_t* partial, int parts) {
  int64_t s = 0;
  for (int i = 0; i < parts; ++i) s += partial[i];
  *out = s;
}

// Σ x in index order, in f64: tiles of 1024 values staged in shared memory, added by one thread in
// order (exactly the host loop's rounding; the sums of a step are short: per-token losses).
template <typename T>
__global__ void ordered_sum_kernel(double* out, const T* x, int64_t n) {
  __shared__ float tile[1024];
  double s = 0.0;
  for (int64_t base = 0; base < n; base += 1024) {
    const int64_t i = base + threadIdx.x;
    tile[threadIdx.x] = i < n ? load_f(x, i) : 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t m = n - base < 1024 ? n - base : 1024;
      for (int64_t j = 0; j < m; ++j) s += static_cast<double>(tile[j]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s;
}

bool on_host(const TensorView& v) { return v.device().is_host(); }

}  // namespace

void fill(Context& ctx, const TensorView& x, double value) {
  const int64_t n = x.numel();
  if (value == 0.0) {  // +0.0 bits in every dtype
    LMT_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), ctx.stream));
    return;
  }
  const unsigned blocks = blocks_for(n, kThreads);
  switch (x.dtype()) {
    case DType::kF32:
      fill_kernel<float><<<blocks, kThreads, 0, ctx.stream>>>(dptr<float>(x), static_cast<float>(value), n);
      break;
    case DType::kBF16:
      fill_kernel<uint16_t><<<blocks, kThreads, 0, ctx.stream>>>(
          dptr<uint16_t>(x), cuda_math::bf16_round(static_cast<float>(value)), n);
      break;
    case DType::kI32:
      fill_kernel<int32_t><<<blocks, kThreads, 0, ctx.stream>>>(dptr<int32_t>(x), static_cast<int32_t>(value), n);
      break;
    default:
      LMT_CHECK(false) << "cuda fill: " << x.to_string() << " (f32, bf16 or i32)";
  }
  LMT_CUDA_LAUNCHED();
}

void copy(Context& ctx, const TensorView& out, const TensorView& inp) {
  LMT_CHECK(!(on_host(out) && on_host(inp))) << "cuda copy between two host views: use the cpu backend";
  LMT_CUDA_CHECK(cudaMemcpyAsync(out.data(), inp.data(), inp.bytes(), cudaMemcpyDefault, ctx.stream));
  // A copy from or to host memory must be complete when the call returns: the caller may reuse or
  // read the host buffer at once.
  if (on_host(out) || on_host(inp)) ctx.sync();
}

void snapshot_async(Context& ctx, const TensorView& out, const TensorView& inp) {
  if (ctx.copy_stream == nullptr) {
    // Non-blocking: the legacy default stream (the allocator's cudaMemset) must not wait for it.
    LMT_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.copy_stream, cudaStreamNonBlocking));
    LMT_CUDA_CHECK(cudaEventCreateWithFlags(&ctx.before_snapshot, cudaEventDisableTiming));
    LMT_CUDA_CHECK(cudaEventCreateWithFlags(&ctx.after_snapshot, cudaEventDisableTiming));
  }
  LMT_CUDA_CHECK(cudaEventRecord(ctx.before_snapshot, ctx.stream));
  LMT_CUDA_CHECK(cudaStreamWaitEvent(ctx.copy_stream, ctx.before_snapshot, 0));
  // Into page-locked memory the host goes on at once; into pageable memory CUDA returns only once
  // the copy is done (it waits for the ops before it, as copy() does).
  LMT_CUDA_CHECK(cudaMemcpyAsync(out.data(), inp.data(), inp.bytes(), cudaMemcpyDefault, ctx.copy_stream));
  ctx.snapshots_pending = true;
}

void join_snapshots(Context& ctx) {
  if (!ctx.snapshots_pending) return;
  LMT_CUDA_CHECK(cudaEventRecord(ctx.after_snapshot, ctx.copy_stream));
  LMT_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, ctx.after_snapshot, 0));
  ctx.snapshots_pending = false;
}

void copy_async(Context& ctx, const TensorView& out, const TensorView& inp) {
  const size_t bytes = inp.bytes();
  if (on_host(inp) && bytes > Context::kUploadSlotMaxBytes) {
    copy(ctx, out, inp);  // past the upload slots' size: copied before returning
    return;
  }
  const void* src = inp.data();
  Context::UploadSlot* slot = nullptr;
  if (on_host(inp)) {
    slot = &ctx.upload_slot(bytes);
    std::memcpy(slot->ptr, src, bytes);
    src = slot->ptr;
  }
  LMT_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyDefault, ctx.stream));
  if (slot != nullptr) {
    LMT_CUDA_CHECK(cudaEventRecord(slot->read, ctx.stream));
    slot->in_use = true;
  }
}

void positions(Context& ctx, const TensorView& out, const TensorView& given, int64_t T) {
  const int64_t n = out.numel();
  int32_t* bad = nullptr;
  if (given.present()) {
    bad = static_cast<int32_t*>(ctx.scratch(sizeof(int32_t)));
    const int32_t none = 0x7fffffff;
    fill_kernel<int32_t><<<1, 1, 0, ctx.stream>>>(bad, none, 1);
    LMT_CUDA_LAUNCHED();
  }
  positions_kernel<<<blocks_for(n, kThreads), kThreads, 0, ctx.stream>>>(dptr<int32_t>(out), dptr<const int32_t>(given),
                                                                         T, n, bad);
  LMT_CUDA_LAUNCHED();
  if (given.present()) {  // the contract checks every given position (a bad one is a caller's bug)
    const int32_t first_bad = read_back(ctx, bad);
    LMT_CHECK(first_bad == 0x7fffffff) << "positions: given position at index " << first_bad << " is outside [0, " << T << ")";
  }
}

int64_t count_valid_targets(Context& ctx, const TensorView& targets, int32_t ignore_index) {
  const int64_t n = targets.numel();
  const int parts = static_cast<int>(blocks_for(n, kThreads, 256));
  int64_t* partial = static_cast<int64_t*>(ctx.scratch(static_cast<size_t>(parts + 1) * sizeof(int64_t)));
  count_kernel<<<parts, kThreads, 0, ctx.stream>>>(partial, dptr<const int32_t>(targets), ignore_index, n);
  LMT_CUDA_LAUNCHED();
  count_total_kernel<<<1, 1, 0, ctx.stream>>>(partial + parts, partial, parts);
  LMT_CUDA_LAUNCHED();
  return read_back(ctx, partial + parts);
}

double sum(Context& ctx, const TensorView& x) {
  double* d = static_cast<double*>(ctx.scratch(sizeof(double)));
  if (is_bf16(x)) {
    ordered_sum_kernel<uint16_t><<<1, 1024, 0, ctx.stream>>>(d, dptr<const uint16_t>(x), x.numel());
  } else {
    ordered_sum_kernel<float><<<1, 1024, 0, ctx.stream>>>(d, dptr<const float>(x), x.numel());
  }
  LMT_CUDA_LAUNCHED();
  return read_back(ctx, d);
}

}  // namespace lmt::kernels::cuda
