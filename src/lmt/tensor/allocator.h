// Allocator: where Tensor and Arena get their memory from, and on which device it lives.
//
// allocate(bytes, alignment) returns memory of at least `bytes` (alignment a power of two; a
// zero-byte request still returns a unique, freeable pointer) and stops the process with a message
// if the device is out of memory (LMT_CHECK: planned sizes are known before step 1, so running out
// is a configuration the planner should have refused). deallocate() takes back exactly what
// allocate() returned, with the same bytes and alignment. zero_fill() writes zero bytes on the
// allocator's device (a host memset here; a device memset for a CUDA allocator), which is how a
// Tensor is zero-initialised without touching device memory from the host.
//
// Ownership: an allocator outlives everything allocated from it (the host allocator is a process-wide
// singleton). Threading: host_allocator() may be called from any thread.
#pragma once

#include <cstddef>

#include "lmt/tensor/device.h"

namespace lmt {

class Allocator {
 public:
  static constexpr size_t kDefaultAlignment = 64;

  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  virtual void* allocate(size_t bytes, size_t alignment = kDefaultAlignment) = 0;
  virtual void deallocate(void* p, size_t bytes, size_t alignment = kDefaultAlignment) = 0;
  virtual void zero_fill(void* p, size_t bytes) = 0;
};

// Host memory, 64-byte aligned by default (std::aligned_alloc).
class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::host(); }
  void* allocate(size_t bytes, size_t alignment = kDefaultAlignment) override;
  void deallocate(void* p, size_t bytes, size_t alignment = kDefaultAlignment) override;
  void zero_fill(void* p, size_t bytes) override;
};

// The process-wide host allocator: the default of Tensor and Arena.
Allocator& host_allocator();

}  // namespace lmt
