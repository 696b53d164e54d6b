// Embedding lookup and its deterministic backward (kernels/backend.h), f32 tables only (backend.h
// allows f32|f64 and the cuda backend refuses f64):
//   embedding_forward:  out[N,C] (= or += when accumulate) table[ids[n], :]   (table [V,C], ids i32)
//   embedding_backward: dtable[V,C] += Σ_{n: ids[n] = v} dout[n, :]
//
// Forward: blockIdx.y strides rows, x-threads stride the C columns; each element read and written once.
//
// Backward without float atomics (the same ids and dout give the same bits every run):
//   1. (id, n) pairs sorted by id with cub::DeviceRadixSort::SortPairs, which is stable, so the rows
//      of one id stay in increasing n;
//   2. one block per run of equal ids (found in the sorted keys: a block whose entry starts a run
//      works, the others skip), threads over the C columns, summing dout rows in sorted order in f32
//      and adding the sum into dtable once.
// The run end is found cooperatively, blockDim keys at a time. Rows are summed 8 at a time (the loads
// of a batch are in flight together, the adds stay in order), so a frequent token's long run costs
// run/8 memory latencies.
//
// Ids outside [0, V) cannot be reported from the device: forward writes NaN for such a row (so the
// loss shows it), backward skips it.
//
// Scratch (one ctx.scratch call): sorted keys, iota values, sorted values (3·N i32) + CUB's temp storage.
#include <cmath>
#include <cstdint>
#include <cub/cub.cuh>
#include <limits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRunThreads = 128;
constexpr int kBatch = 8;

__global__ void __launch_bounds__(kThreads) embedding_forward_kernel(float* out, const int32_t* ids, const float* table,
                                                                     int64_t N, int64_t V, int64_t C, bool accumulate) {
  for (int64_t row = blockIdx.y; row < N; row += gridDim.y) {
    const int64_t id = ids[row];
    const bool valid = id >= 0 && id < V;
    const float* src = table + (valid ? id : 0) * C;
    float* dst = out + row * C;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float e = valid ? src[c] : NAN;
      dst[c] = accumulate ? dst[c] + e : e;
    }
  }
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[i] = static_cast<int32_t>(i);
}

// keys: ids sorted ascending; rows: the original row of each sorted entry (ascending within a run).
__global__ void __launch_bounds__(kRunThreads)
    embedding_backward_runs_kernel(float* dtable, const float* dout, const int32_t* keys, const int32_t* rows,
                                   int32_t N, int64_t V, int64_t C) {
  __shared__ int32_t run_end;
  const int tid = threadIdx.x;
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {  // 64-bit: i + gridDim.x may pass INT_MAX
    const int32_t key = keys[i];
    // The same decision in every thread of the block, so the barriers below are never divergent.
    if ((i > 0 && keys[i - 1] == key) || key < 0 || key >= V) continue;
    __syncthreads();  // every thread has read run_end of this block's previous run
    if (tid == 0) run_end = N;
    __syncthreads();
    for (int64_t base = i + 1; base < N; base += blockDim.x) {
      const int64_t j = base + tid;
      const bool differs = j < N && keys[j] != key;
      if (differs) atomicMin(&run_end, static_cast<int32_t>(j));  // integer min: the same result in any order
      if (__syncthreads_or(differs)) break;                       // also orders the atomics before the read below
    }
    const int64_t end = run_end;
    float* dst = dtable + static_cast<int64_t>(key) * C;
    for (int64_t c = tid; c < C; c += blockDim.x) {
      float acc = 0.0f;
      int64_t j = i;
      for (; j + kBatch <= end; j += kBatch) {
        float v[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) v[k] = dout[static_cast<int64_t>(rows[j + k]) * C + c];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) acc += v[k];
      }
      for (; j < end; ++j) acc += dout[static_cast<int64_t>(rows[j]) * C + c];
      dst[c] += acc;
    }
  }
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

}  // namespace

void embedding_forward(Context& ctx, const TensorView& out, const TensorView& ids, const TensorView& table,
                       bool accumulate) {
  const int64_t N = ids.dim(0), V = table.dim(0), C = table.dim(1);
  float* o = dptr<float>(out);
  const int32_t* id = dptr<const int32_t>(ids);
  const float* t = dptr<const float>(table);
  if (N == 0 || C == 0) return;
  const dim3 grid(blocks_for(C, kThreads, 1024), static_cast<unsigned>(N < 65535 ? N : 65535));
  embedding_forward_kernel<<<grid, kThreads, 0, ctx.stream>>>(o, id, t, N, V, C, accumulate);
  LMT_CUDA_LAUNCHED();
}

void embedding_backward(Context& ctx, const TensorView& dtable, const TensorView& dout, const TensorView& ids) {
  const int64_t N = ids.dim(0), V = dtable.dim(0), C = dtable.dim(1);
  float* dt = dptr<float>(dtable);
  const float* dy = dptr<const float>(dout);
  const int32_t* id = dptr<const int32_t>(ids);
  if (N == 0 || C == 0) return;
  LMT_CHECK(N <= std::numeric_limits<int32_t>::max()) << "cuda embedding_backward: " << N << " rows is too many";
  const int n = static_cast<int>(N);

  size_t cub_bytes = 0;
  LMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), n, 0, 32, ctx.stream));
  const size_t arr = align256(static_cast<size_t>(N) * sizeof(int32_t));
  char* s = static_cast<char*>(ctx.scratch(3 * arr + align256(cub_bytes)));
  int32_t* keys_sorted = reinterpret_cast<int32_t*>(s);
  int32_t* rows_in = reinterpret_cast<int32_t*>(s + arr);
  int32_t* rows_sorted = reinterpret_cast<int32_t*>(s + 2 * arr);
  void* cub_temp = s + 3 * arr;

  iota_kernel<<<blocks_for(N, kThreads), kThreads, 0, ctx.stream>>>(rows_in, N);
  LMT_CUDA_LAUNCHED();
  // All 32 key bits: ids outside [0, V) (negative ones included) still sort consistently and are skipped.
  LMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, id, keys_sorted, rows_in, rows_sorted, n, 0, 32,
                                                 ctx.stream));
  const unsigned blocks = static_cast<unsigned>(N < 65535 * 16 ? N : 65535 * 16);
  embedding_backward_runs_kernel<<<blocks, kRunThreads, 0, ctx.stream>>>(dt, dy, keys_sorted, rows_sorted, n, V, C);
  LMT_CUDA_LAUNCHED();
}

}  // namespace lmt::kernels::cuda
