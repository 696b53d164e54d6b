// Tensor: an owning, 64-byte-aligned, zero-initialised buffer with a TensorView over it.
// For tests, tools and long-lived state; hot paths take views carved from an Arena instead.
//
// The memory comes from an Allocator (default: host_allocator()); the view carries its device, and
// the zero-fill goes through the allocator, so a Tensor on a device never touches its memory from
// the host. The allocator must outlive the Tensor.
// Tensor::over() makes a Tensor of memory another object owns (e.g. memory shared between
// processes), keeping that owner alive as long as the Tensor.
#pragma once

#include <memory>

#include "lmt/tensor/allocator.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DType dtype, Allocator& allocator = host_allocator());  // zero-filled
  // A Tensor over `data` (shape.numel() elements of dtype on `device`, contents kept), which
  // `owner` keeps valid.
  static Tensor over(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner,
                     Device device = Device::host());
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: a Tensor is usable as its view
  template <typename T>
  T* as() const { return view_.as<T>(); }
  int64_t numel() const { return view_.numel(); }
  const Shape& shape() const { return view_.shape(); }
  DType dtype() const { return view_.dtype(); }
  Device device() const { return view_.device(); }
  size_t bytes() const { return view_.bytes(); }

 private:
  std::shared_ptr<void> mem_;  // the allocation, or the owner of the memory of over()
  TensorView view_;
};

// Host memory: allocates `bytes` aligned to `alignment` (a power of two); freed with aligned_free.
// What HostAllocator uses; code that means "any device" takes an Allocator instead. From
// kHugePageMinBytes up the block is aligned to and rounded up to 2 MiB and asked to be backed by
// transparent huge pages (madvise): parameters, gradients, optimizer state, the activation arena
// and the kernels' workspaces then take 512× fewer TLB entries (docs/PERFORMANCE.md).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kHugePageMinBytes = size_t{4} << 20;
void* aligned_alloc_bytes(size_t bytes, size_t alignment = 64);
void aligned_free(void* p);

}  // namespace lmt
