// Sums several f32 tensors (parts of a model's gradient) over a group with one collective: packed
// end to end into one buffer in the backend's memory by the backend's copies, summed in place, and
// copied back. Model-parallel plans use it for the gradients each rank holds only a part of
// (expert_shard_plan.h, model_split.h).
#pragma once

#include <vector>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/kernels/backend.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

// Every rank of `comm` calls it with parts of the same shapes, in the same order. parts: contiguous
// f32 views in `be`'s memory, which `comm` must take (a device communicator on a device backend).
// `buffer` is reused across calls (reallocated from be's allocator when the total size changes).
Status sum_packed(kernels::Backend& be, dist::Communicator& comm, const std::vector<TensorView>& parts,
                  Tensor& buffer);

}  // namespace lmt::train
