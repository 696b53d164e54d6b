// The Trainer's tensor-parallel plan (tensor_parallel_plan.h).
#include "lmt/train/tensor_parallel_plan.h"

#include <cstring>

#include "lmt/base/check.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"

namespace lmt::train {

model::TensorParallel TensorParallelPlan::model_group(bool sequence_parallel) {
  model::TensorParallel g;
  g.rank = rank();
  g.size = size();
  g.sequence_parallel = sequence_parallel;
  g.vocab_size = map_.full_layout().config().vocab_size;
  g.all_reduce = [this](const TensorView& x) -> Status {
    LMT_TRACE_SCOPE("op:tp_comm");  // a family of its own in --profile
    Timer t;
    Status s;
    if (x.dtype() == DType::kF32) s = comm_.all_reduce_sum(x.as<float>(), x.numel());
    else if (x.dtype() == DType::kF64) s = comm_.all_reduce_sum(x.as<double>(), x.numel());
    else s = InvalidArgument(std::string("tensor-parallel sum of a ") + std::string(dtype_name(x.dtype())) + " buffer",
                             "the blocks sum f32 or f64 activations");
    comm_seconds_ += t.seconds();
    return s;
  };
  g.all_gather = [this](const TensorView& all) -> Status {
    LMT_CHECK(all.dtype() == DType::kF32 && all.dim(0) == size())
        << "tensor-parallel gather of " << all.to_string();
    LMT_TRACE_SCOPE("op:tp_comm");
    Timer t;
    const Status s = comm_.all_gather(all.as<float>(), equal_counts(all.numel() / size()));
    comm_seconds_ += t.seconds();
    return s;
  };
  g.reduce_scatter = [this](const TensorView& full, const TensorView& part) -> Status {
    LMT_CHECK(full.dtype() == DType::kF32 && part.dtype() == DType::kF32 &&
              full.numel() == part.numel() * size())
        << "tensor-parallel reduce-scatter of " << full.to_string() << " into " << part.to_string();
    LMT_TRACE_SCOPE("op:tp_comm");
    Timer t;
    const Status s = comm_.reduce_scatter_sum(full.as<float>(), part.as<float>(), equal_counts(part.numel()));
    comm_seconds_ += t.seconds();
    return s;
  };
  return g;
}

const std::vector<int64_t>& TensorParallelPlan::equal_counts(int64_t n) {
  counts_.assign(static_cast<size_t>(size()), n);  // no allocation after the first call
  return counts_;
}

Status TensorParallelPlan::gather(const float* shard, float* full) {
  const int64_t n = map_.shard_layout().total_numel();
  if (!gathered_.view().present()) gathered_ = Tensor({n * size()}, DType::kF32);
  float* all = gathered_.as<float>();
  std::memcpy(all + rank() * n, shard, static_cast<size_t>(n) * sizeof(float));
  LMT_RETURN_IF_ERROR(comm_.all_gather(all, equal_counts(n)));
  map_.assemble(all, full);
  return Status::Ok();
}

}  // namespace lmt::train
