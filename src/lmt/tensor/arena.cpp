#include "lmt/tensor/arena.h"

#include <limits>

namespace lmt {

void Arena::Free::operator()(char* p) const { allocator->deallocate(p, bytes, kAlignment); }

Arena::Arena(size_t capacity_bytes, Allocator& allocator)
    : base_(static_cast<char*>(allocator.allocate(round_up(capacity_bytes), kAlignment)),
            Free{&allocator, round_up(capacity_bytes)}),
      capacity_(round_up(capacity_bytes)),
      device_(allocator.device()) {}

Arena Arena::Measuring() {
  Arena a;
  a.capacity_ = std::numeric_limits<size_t>::max();
  return a;
}

TensorView Arena::allocate(Shape shape, DType dtype, const char* name) {
  size_t bytes = round_up(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  LMT_CHECK(bytes <= capacity_ - used_) << "arena full allocating " << name << " "
                                        << dtype_name(dtype) << shape.to_string() << ": used "
                                        << used_ << " of " << capacity_ << " bytes";
  void* p = measuring() ? nullptr : base_.get() + used_;
  used_ += bytes;
  if (used_ > peak_) peak_ = used_;
  return TensorView(p, shape, dtype, device_);
}

void Arena::release(size_t mark) {
  LMT_CHECK(mark <= used_) << "release to " << mark << " above used " << used_;
  used_ = mark;
}

}  // namespace lmt
