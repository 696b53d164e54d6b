// The CUDA context (context.h) and the device allocator (cuda_allocator.h).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <string>

#include "lmt/base/log.h"
#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/cuda_allocator.h"

namespace lmt::kernels::cuda {

int visible_device_count(const char** why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

void* Context::scratch(size_t bytes) {
  if (bytes > scratch_bytes) {
    if (scratch_ptr != nullptr) {
      LMT_CUDA_CHECK(cudaStreamSynchronize(stream));
      LMT_CUDA_CHECK(cudaFree(scratch_ptr));
      scratch_ptr = nullptr;
    }
    const size_t grown = bytes + bytes / 4;  // headroom: a step's scratch needs settle quickly
    const cudaError_t e = cudaMalloc(&scratch_ptr, grown);
    LMT_CHECK(e == cudaSuccess) << "cuda: cannot allocate " << grown << " bytes of kernel scratch: "
                                << cudaGetErrorString(e) << " (hint: a smaller micro-batch or lm_head chunk)";
    scratch_bytes = grown;
  }
  return scratch_ptr;
}

void* Context::pinned(size_t bytes) {
  if (bytes > host_pinned_bytes) {
    if (host_pinned != nullptr) {
      LMT_CUDA_CHECK(cudaStreamSynchronize(stream));
      LMT_CUDA_CHECK(cudaFreeHost(host_pinned));
    }
    LMT_CUDA_CHECK(cudaMallocHost(&host_pinned, bytes));
    host_pinned_bytes = bytes;
  }
  return host_pinned;
}

Context::UploadSlot& Context::upload_slot(size_t bytes) {
  UploadSlot& u = uploads[next_upload];
  next_upload = (next_upload + 1) % kUploadSlots;
  if (u.read == nullptr) LMT_CUDA_CHECK(cudaEventCreateWithFlags(&u.read, cudaEventDisableTiming));
  if (u.in_use) LMT_CUDA_CHECK(cudaEventSynchronize(u.read));  // the GPU has read the slot's last upload
  u.in_use = false;
  if (bytes > u.bytes) {
    if (u.ptr != nullptr) LMT_CUDA_CHECK(cudaFreeHost(u.ptr));
    u.ptr = nullptr;
    const size_t grown = bytes < 4096 ? 4096 : bytes + bytes / 4;
    LMT_CUDA_CHECK(cudaMallocHost(&u.ptr, grown));
    u.bytes = grown;
  }
  return u;
}

void Context::sync() {
  LMT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (copy_stream != nullptr) LMT_CUDA_CHECK(cudaStreamSynchronize(copy_stream));
}

void* CudaAllocator::allocate(size_t bytes, size_t alignment) {
  LMT_CHECK(alignment <= 256) << "cuda allocator: alignment " << alignment << " > 256 is not supported";
  LMT_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    LMT_CHECK(false) << "cuda:" << device_ << " out of memory: asked for " << bytes << " bytes, "
                     << free_b << " of " << total_b << " free (" << cudaGetErrorString(e)
                     << "); hint: lower train.micro_batch or seq_len, turn on recompute, or check with "
                        "`lmtrain plan --hardware`";
  }
  in_use_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  return p;
}

void CudaAllocator::deallocate(void* p, size_t bytes, size_t) {
  if (p == nullptr) return;
  // Memory may still be read by queued kernels: cudaFree waits for the device to be idle first.
  LMT_CUDA_CHECK(cudaFree(p));
  in_use_ -= bytes;
}

void CudaAllocator::zero_fill(void* p, size_t bytes) {
  if (bytes == 0) return;
  LMT_CUDA_CHECK(cudaMemset(p, 0, bytes));
}

void* PinnedHostAllocator::allocate(size_t bytes, size_t alignment) {
  LMT_CHECK(alignment <= 4096) << "pinned host allocator: alignment " << alignment << " > 4096 is not supported";
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (e == cudaSuccess) return p;
  cudaGetLastError();
  if (!warned_.exchange(true)) {
    LMT_LOG(WARNING) << "cuda: cannot page-lock " << bytes << " bytes of host memory (" << cudaGetErrorString(e)
                     << "); checkpoint snapshots use ordinary host memory, and copying into it waits for the GPU";
  }
  p = host_allocator().allocate(bytes, alignment);
  std::lock_guard<std::mutex> lock(mu_);
  unpinned_.insert(p);
  return p;
}

void PinnedHostAllocator::deallocate(void* p, size_t bytes, size_t alignment) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (unpinned_.erase(p) > 0) {
      host_allocator().deallocate(p, bytes, alignment);
      return;
    }
  }
  LMT_CUDA_CHECK(cudaFreeHost(p));  // callers free staging buffers only after their copies' fence
}

void PinnedHostAllocator::zero_fill(void* p, size_t bytes) { std::memset(p, 0, bytes); }

}  // namespace lmt::kernels::cuda
