#include "lmt/tensor/allocator.h"

#include <cstring>

#include "lmt/tensor/tensor.h"  // aligned_alloc_bytes, aligned_free

namespace lmt {

void* HostAllocator::allocate(size_t bytes, size_t alignment) { return aligned_alloc_bytes(bytes, alignment); }

void HostAllocator::deallocate(void* p, size_t /*bytes*/, size_t /*alignment*/) { aligned_free(p); }

void HostAllocator::zero_fill(void* p, size_t bytes) {
  if (bytes > 0) std::memset(p, 0, bytes);
}

Allocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

}  // namespace lmt
