#include "lmt/tensor/tensor_view.h"

namespace lmt {

Shape::Shape(std::initializer_list<int64_t> dims) {
  LMT_CHECK(dims.size() <= kMaxRank) << "rank " << dims.size() << " > " << kMaxRank;
  for (int64_t d : dims) {
    LMT_CHECK(d >= 0) << "negative dimension " << d;
    dims_[rank_++] = d;
  }
}

int64_t Shape::dim(int i) const {
  int j = i < 0 ? rank_ + i : i;
  LMT_CHECK(j >= 0 && j < rank_) << "dimension " << i << " of shape " << to_string();
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::with_dim(int i, int64_t value) const {
  LMT_CHECK(i >= 0 && i < rank_ && value >= 0) << "with_dim(" << i << "," << value << ") of " << to_string();
  Shape s = *this;
  s.dims_[i] = value;
  return s;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ",";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

TensorView TensorView::reshape(Shape s) const {
  LMT_CHECK_EQ(s.numel(), numel()) << "reshape of " << to_string() << " to " << s.to_string();
  return TensorView(data_, s, dtype_, device_);
}

TensorView TensorView::slice_rows(int64_t begin, int64_t end) const {
  LMT_CHECK(rank() >= 1 && begin >= 0 && begin <= end && end <= dim(0))
      << "slice_rows(" << begin << "," << end << ") of " << to_string();
  int64_t row = dim(0) == 0 ? 0 : numel() / dim(0);
  Shape out = shape_.with_dim(0, end - begin);
  char* p = static_cast<char*>(data_) + static_cast<size_t>(begin * row) * dtype_size(dtype_);
  return TensorView(p, out, dtype_, device_);
}

std::string TensorView::to_string() const {
  if (!present()) return "absent";
  std::string s = std::string(dtype_name(dtype_)) + shape_.to_string();
  return device_.is_host() ? s : s + "@" + device_.to_string();
}

}  // namespace lmt
