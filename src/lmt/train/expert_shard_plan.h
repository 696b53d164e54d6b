// ExpertShardPlan: expert parallelism that shards the experts (parallel.ep > 1 with tp = pp = 1):
// rank r of an ep group of P holds routed experts [r·E/P, (r+1)·E/P) of every MoE layer and
// nothing of the others (moe.local_experts / first_expert of its config), so the experts'
// parameters, gradients and optimizer state are split P ways, as `lmtrain plan --ep` counts.
// Everything else (attention, norms, routers, shared experts, embeddings, head) is replicated.
//
//   groups       ep: P consecutive data-parallel ranks (exchange tokens in every MoE layer); edp:
//                the D/P data-parallel ranks holding the same experts (the Trainer's DataParallel
//                runs over it, so ZeRO shards over edp).
//   gradients    after backward the replicated tensors' gradients are partial over the ep group
//                (each rank saw its own tokens): reduce_partial_grads() sums them over it; then
//                DataParallel sums everything over edp. Together: the dense gradients over all D
//                data-parallel ranks, each expert's over the ranks that hold it (its rows came from
//                the whole ep group through the all-to-all).
//   checkpoints  gather() assembles whole-model buffers (all-gather over ep; the experts by name,
//                the replicated tensors from rank 0), scatter() keeps this rank's experts, so
//                checkpoints are whole models (HF names) and resume under any ep.
//
// All f32 host buffers. Ownership: borrows the ep communicator. Threading: the Trainer's thread.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

class ExpertShardPlan {
 public:
  // `whole` an MoE model with num_experts divisible by ep.world() (checked).
  ExpertShardPlan(dist::Communicator& ep, const model::ModelConfig& whole);

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.world(); }
  const model::ModelConfig& local_config() const { return locals_[static_cast<size_t>(rank())].config(); }
  const model::ParamLayout& whole_layout() const { return whole_; }
  dist::Communicator& comm() { return comm_; }

  // local[local numel] = this rank's part of whole[whole numel] (gaps zeroed). Host memory.
  void scatter(const float* whole, float* local) const;
  // Collective over ep: whole[whole numel] on every rank from every rank's local buffer. Host memory.
  Status gather(const float* local, float* whole);
  // [begin, end) ranges of the local layout holding replicated tensors (everything but the
  // routed experts), sorted and merged.
  const std::vector<std::pair<int64_t, int64_t>>& replicated_ranges() const { return replicated_; }
  // Collective over ep: sums the replicated tensors' gradients of m (this rank's local model), packed
  // by the backend's copies into one buffer of its memory (on a device backend the ep communicator
  // sums device memory, NCCL on a GPU).
  Status reduce_partial_grads(model::Transformer& m);

 private:
  // to_whole: local (rank r's layout) -> whole, else whole -> local; replicated tensors too when
  // `replicated`.
  void copy(int r, float* whole, float* local, bool to_whole, bool replicated) const;

  dist::Communicator& comm_;
  model::ParamLayout whole_;
  std::vector<model::ParamLayout> locals_;              // every rank's layout
  std::vector<std::pair<int64_t, int64_t>> replicated_;
  Tensor gathered_;                                     // [P · local numel], allocated on first gather
  Tensor packed_;  // reduce_partial_grads' buffer, in the model backend's memory (allocated once)
};

// The config of ep rank `rank` of `size`: experts [rank·E/size, (rank+1)·E/size).
model::ModelConfig expert_shard_config(const model::ModelConfig& whole, int size, int rank);

}  // namespace lmt::train
