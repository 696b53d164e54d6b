#include "lmt/tensor/tensor.h"

#include <algorithm>
#include <cstdlib>

#include <sys/mman.h>

namespace lmt {

void* aligned_alloc_bytes(size_t bytes, size_t alignment) {
  const bool huge = bytes >= kHugePageMinBytes;
  if (huge) alignment = std::max(alignment, kHugePageBytes);
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  LMT_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  // Where transparent huge pages are on request only ("madvise", Debian's default), ask for them:
  // no effect elsewhere, and a refusal costs nothing but the speed.
  if (huge) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void aligned_free(void* p) { std::free(p); }

Tensor::Tensor(Shape shape, DType dtype, Allocator& allocator) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  Allocator* a = &allocator;
  mem_.reset(a->allocate(bytes, Allocator::kDefaultAlignment),
             [a, bytes](void* p) { a->deallocate(p, bytes, Allocator::kDefaultAlignment); });
  a->zero_fill(mem_.get(), bytes);
  view_ = TensorView(mem_.get(), shape, dtype, a->device());
}

Tensor Tensor::over(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.mem_ = std::move(owner);
  t.view_ = TensorView(data, shape, dtype, device);
  return t;
}

}  // namespace lmt
