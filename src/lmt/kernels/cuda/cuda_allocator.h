// Device memory of one CUDA device, for Tensor and Arena (tensor/allocator.h).
//
// allocate() is cudaMalloc (256-byte aligned, enough for every alignment the tree asks for; a larger
// alignment is refused), zero_fill() a cudaMemset on the device. Running out of device memory stops
// the process with the request, what is free and a hint (the planner should have refused the run).
// Large buffers are allocated once before step 1 (the model's flat buffers and its activation arena),
// so no allocation happens inside a training step.
#pragma once

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

}  // namespace lmt::kernels::cuda
