// Host code's access to a tensor wherever the backend keeps it (the routing bookkeeping of MoE
// layers, the vocabulary-parallel loss combine): a host tensor is used in place, a device tensor
// through a host copy made with the backend's copy() (a device backend's memory is not the host's).
// Contiguous tensors of element type T only. Threading: the caller's (the backend's op thread).
#pragma once

#include <cstdint>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::model {

// t's elements for reading and writing; store() makes the writes t's (a no-op for a host tensor,
// which was written in place).
template <typename T>
class HostEdit {
 public:
  HostEdit(kernels::Backend& be, const TensorView& t) : be_(be), t_(t) {
    if (t.device().is_host()) {
      p_ = t.as<T>();
      return;
    }
    buf_.resize(static_cast<size_t>(t.numel()));
    be.copy(TensorView(buf_.data(), Shape{t.numel()}, t.dtype()), t);
    p_ = buf_.data();
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  void store() {
    if (!buf_.empty()) be_.copy(t_, TensorView(buf_.data(), Shape{t_.numel()}, t_.dtype()));
  }

 private:
  kernels::Backend& be_;
  TensorView t_;
  std::vector<T> buf_;
  T* p_ = nullptr;
};

// t's elements for reading, valid while this lives.
template <typename T>
class HostRead {
 public:
  HostRead(kernels::Backend& be, const TensorView& t) : e_(be, t) {}
  const T* data() const { return e_.data(); }
  T operator[](int64_t i) const { return e_.data()[i]; }

 private:
  HostEdit<T> e_;
};

// t (numel n, dtype T) = src[0, n).
template <typename T>
void write_from_host(kernels::Backend& be, const TensorView& t, const T* src) {
  if (t.numel() > 0) be.copy(t, TensorView(const_cast<T*>(src), Shape{t.numel()}, t.dtype()));
}

}  // namespace lmt::model
