// TensorParallelPlan: what the Trainer adds for tensor parallelism (parallel.tp > 1) around one
// rank's part of the model (model/tensor_parallel.h): the shard config it builds the Transformer of,
// the group sum the blocks call, and the collectives that keep checkpoints layout-independent.
//
//   setup        the full model is initialised (seed, or init_from) in the full layout on every rank
//                and scatter() keeps this rank's part, so a TP run starts from the single process's
//                weights exactly;
//   checkpoints  gather() assembles full-layout parameters (and, through ModelSplit, optimizer
//                state) on every rank of the group (all-gather, then TensorParallelMap::assemble); a checkpoint
//                is therefore the one a single process writes (full HF-named tensors) and resumes
//                under any tp. scatter() loads one back.
//
// The model's group sums its activations where the backend keeps them: the tp communicator is a
// device communicator on a device backend (train/device_world.h), which takes device and host
// buffers alike. The checkpoint collectives are f32 in host memory (the trainer stages a device
// backend's buffers through the host). Ownership: borrows the tp group's communicator (the
// Topology's). Threading: the Trainer's thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

class TensorParallelPlan {
 public:
  // `full` must be shardable by tp.world() (model::shard_config ok; checked).
  TensorParallelPlan(dist::Communicator& tp, const model::ModelConfig& full) : comm_(tp), map_(full, tp.world()) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.world(); }
  const model::TensorParallelMap& map() const { return map_; }
  const model::ModelConfig& shard_config() const { return map_.shard_layout().config(); }
  const model::ParamLayout& full_layout() const { return map_.full_layout(); }

  // The group for Transformer::set_tensor_parallel: sums f32/f64 buffers (host or the backend's
  // memory) over comm_. Borrows this
  // plan (it must outlive the model's use of the group).
  model::TensorParallel model_group(bool sequence_parallel = false);
  // Seconds spent in the group's sums (forward and backward) since the last call.
  double take_comm_seconds() { return std::exchange(comm_seconds_, 0.0); }

  // Collective over the group: full[full numel] (on every rank) from every rank's shard.
  Status gather(const float* shard, float* full);
  // This rank's shard of full (local).
  void scatter(const float* full, float* shard) const { map_.take_shard(rank(), full, shard); }

 private:
  dist::Communicator& comm_;
  model::TensorParallelMap map_;
  // [size] copies of n: the per-rank counts of an even collective (a member, so the sums inside
  // every forward and backward allocate nothing).
  const std::vector<int64_t>& equal_counts(int64_t n);

  Tensor gathered_;  // [size · shard numel]: the all-gather's buffer, allocated on first use
  std::vector<int64_t> counts_;
  double comm_seconds_ = 0;
};

}  // namespace lmt::train
