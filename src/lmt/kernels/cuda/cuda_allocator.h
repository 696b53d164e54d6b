// Device memory of one CUDA device, for Tensor and Arena (tensor/allocator.h).
//
// allocate() is cudaMalloc (256-byte aligned, enough for every alignment the tree asks for; a larger
// alignment is refused), zero_fill() a cudaMemset on the device. Running out of device memory stops
// the process with the request, what is free and a hint (the planner should have refused the run).
// Large buffers are allocated once before step 1 (the model's flat buffers and its activation arena),
// so no allocation happens inside a training step.
#pragma once

#include <atomic>
#include <mutex>
#include <unordered_set>

#include "lmt/tensor/allocator.h"

namespace lmt::kernels::cuda {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  Device device() const override { return Device::cuda(device_); }
  void* allocate(size_t bytes, size_t alignment = kDefaultAlignment) override;
  void deallocate(void* p, size_t bytes, size_t alignment = kDefaultAlignment) override;
  void zero_fill(void* p, size_t bytes) override;
  // The most bytes handed out and not yet returned at once (Backend::device_memory_peak_bytes).
  size_t peak_bytes() const { return peak_; }

 private:
  int device_;
  size_t in_use_ = 0, peak_ = 0;
};

// Page-locked host memory (cudaHostAlloc, portable to every device): Backend::staging_allocator()
// of the cuda backend, for transfers that neither stage through the driver's bounce buffer nor make
// the host wait. Where the system refuses to lock more memory, it warns once and hands out ordinary
// host memory (copies into it are then synchronous: slower, still correct). Thread-safe.
class PinnedHostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::host(); }
  void* allocate(size_t bytes, size_t alignment = kDefaultAlignment) override;
  void deallocate(void* p, size_t bytes, size_t alignment = kDefaultAlignment) override;
  void zero_fill(void* p, size_t bytes) override;

 private:
  std::mutex mu_;
  std::unordered_set<void*> unpinned_;  // the fallback's blocks
  std::atomic<bool> warned_{false};
};

}  // namespace lmt::kernels::cuda
