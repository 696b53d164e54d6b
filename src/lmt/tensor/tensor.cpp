#include "lmt/tensor/tensor.h"

#include <cstdlib>
#include <cstring>

namespace lmt {

void* aligned_alloc_bytes(size_t bytes, size_t alignment) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded == 0) rounded = alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  LMT_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  return p;
}

void aligned_free(void* p) { std::free(p); }

Tensor::Tensor(Shape shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  mem_.reset(aligned_alloc_bytes(bytes), aligned_free);
  std::memset(mem_.get(), 0, bytes);
  view_ = TensorView(mem_.get(), shape, dtype);
}

Tensor Tensor::over(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner) {
  Tensor t;
  t.mem_ = std::move(owner);
  t.view_ = TensorView(data, shape, dtype);
  return t;
}

}  // namespace lmt
