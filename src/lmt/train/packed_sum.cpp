// sum_packed: see packed_sum.h.
#include "lmt/train/packed_sum.h"

#include "lmt/base/check.h"

namespace lmt::train {

Status sum_packed(kernels::Backend& be, dist::Communicator& comm, const std::vector<TensorView>& parts,
                  Tensor& buffer) {
  int64_t n = 0;
  for (const TensorView& v : parts) {
    LMT_CHECK(v.dtype() == DType::kF32) << "a packed gradient sum takes f32 tensors, not " << v.to_string();
    n += v.numel();
  }
  if (n == 0) return Status::Ok();
  if (!buffer.view().present() || buffer.numel() != n) buffer = Tensor({n}, DType::kF32, be.allocator());
  const TensorView packed = buffer.view();
  int64_t at = 0;
  for (const TensorView& v : parts) {
    be.copy(packed.slice_rows(at, at + v.numel()), v.reshape({v.numel()}));
    at += v.numel();
  }
  LMT_RETURN_IF_ERROR(comm.all_reduce_sum(buffer.as<float>(), n));
  at = 0;
  for (const TensorView& v : parts) {
    be.copy(v.reshape({v.numel()}), packed.slice_rows(at, at + v.numel()));
    at += v.numel();
  }
  return Status::Ok();
}

}  // namespace lmt::train
