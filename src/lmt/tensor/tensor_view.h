// TensorView: a non-owning, contiguous, row-major view (pointer, shape, dtype, device).
//
// Views never own or free memory; an Arena or a Tensor does. A default-constructed view is "absent"
// (data == nullptr, rank 0) and is how optional kernel arguments are passed. Rank is at most 6.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "lmt/base/bf16.h"
#include "lmt/base/check.h"
#include "lmt/tensor/device.h"
#include "lmt/tensor/dtype.h"

namespace lmt {

class Shape {
 public:
  static constexpr int kMaxRank = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { LMT_DCHECK(i >= 0 && i < rank_); return dims_[i]; }
  int64_t dim(int i) const;  // negative i counts from the end; checked
  int64_t numel() const;
  Shape with_dim(int i, int64_t value) const;  // copy with dimension i replaced
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string to_string() const;  // "[4,768]"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<bf16>() { return DType::kBF16; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::kU16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::kU32; }

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, Shape shape, DType dtype, Device device = Device::host())
      : data_(data), shape_(shape), dtype_(dtype), device_(device) {}

  bool present() const { return data_ != nullptr; }
  void* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Typed pointer; checks that T matches the dtype. The pointer may be device memory: only code
  // that runs on device() (a backend for it, or host code for host views) may dereference it.
  template <typename T>
  T* as() const {
    LMT_CHECK(dtype_ == dtype_of<T>()) << "view of " << to_string() << " read as " << dtype_name(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  // Same memory, another shape with the same number of elements.
  TensorView reshape(Shape s) const;
  // Rows [begin, end) along dimension 0.
  TensorView slice_rows(int64_t begin, int64_t end) const;

  std::string to_string() const;  // "f32[4,768]", "f32[4,768]@cuda:0" off the host, or "absent"

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_;
};

}  // namespace lmt
