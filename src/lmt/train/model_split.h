// ModelSplit: how a rank's model relates to the whole model under tensor and pipeline parallelism
// (parallel.tp, parallel.pp), composed: the whole model is split tp ways (tensor_parallel_plan.h),
// and that part's layers into pp stages (pipeline_plan.h); this rank holds one stage of one part.
// With parallel.ep > 1 that stage's routed experts are sharded over the ep group too
// (expert_shard_plan.h): this rank holds its experts of it and every other tensor of it.
// With tp = pp = ep = 1 it holds the whole model and every method is a copy.
//
// It gives the Trainer one place for what every layout needs alike:
//   local_config()  the model this rank builds;
//   scatter()       this rank's part of whole-model f32 buffers (initialisation, checkpoints);
//   gather()        whole-model buffers from every rank's part (collective over the tp and pp
//                   groups), so checkpoints are always whole models with HF names, resumable under
//                   any layout;
//   add_groups()    the grad-norm bookkeeping of DataParallel (what is replicated over each group).
//
// Ownership: borrows the Topology's groups. Threading: the Trainer's thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmt/dist/topology.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"
#include "lmt/train/data_parallel.h"
#include "lmt/train/expert_shard_plan.h"
#include "lmt/train/pipeline_plan.h"
#include "lmt/train/tensor_parallel_plan.h"

namespace lmt::train {

class ModelSplit {
 public:
  // `whole` must be valid for the topology's tp and pp (tensor_parallel_supported,
  // pipeline_supported; checked by the plans). seq_len: the stages are balanced by FLOPs at it.
  // pp_layers: blocks per stage when given (parallel.pp_layers).
  // expert_shards: the ep group when the experts are sharded over it (expert_shard_plan.h): the
  // local model then holds its ep rank's experts of its (tensor-parallel part's) stage.
  ModelSplit(dist::Topology& topology, const model::ModelConfig& whole, int64_t seq_len,
             const std::vector<int64_t>& pp_layers = {}, dist::Communicator* expert_shards = nullptr);

  bool split() const { return tp_ != nullptr || pp_ != nullptr || ep_ != nullptr; }
  const ExpertShardPlan* experts() const { return ep_.get(); }
  TensorParallelPlan* tensor() { return tp_.get(); }
  const TensorParallelPlan* tensor() const { return tp_.get(); }
  PipelinePlan* pipeline() { return pp_.get(); }
  const model::ModelConfig& local_config() const { return local_; }
  const model::ParamLayout& whole_layout() const { return whole_; }

  // local[local numel] = this rank's part of whole[whole numel].
  void scatter(const float* whole, float* local) const;
  // Collective over the tp and pp groups: whole[whole numel] from every rank's local buffer.
  Status gather(const float* local, float* whole);
  // Collective: whole-model copies of per-parameter state buffers of the local layout.
  StatusOr<std::vector<std::pair<std::string, Tensor>>> gather_state(
      const std::vector<std::pair<std::string, TensorView>>& local_state);
  // Registers the tp and pp groups with `dp` for the global gradient norm; `local` is the model's layout.
  void add_groups(DataParallel& dp, const model::ParamLayout& local) const;
  // After every backward of a step (collective): sums the gradients that each rank holds only a part
  // of over its group — the pipeline's ends over the stages; under tensor parallelism the per-head
  // QK-norm weights (shared by the heads that the ranks split), and with sequence parallelism every
  // norm and the position embedding (each rank saw its rows only).
  Status reduce_partial_grads(model::Transformer& m);

 private:
  dist::Topology& topo_;
  model::ParamLayout whole_;
  std::unique_ptr<TensorParallelPlan> tp_;
  std::unique_ptr<PipelinePlan> pp_;
  std::unique_ptr<ExpertShardPlan> ep_;
  model::ModelConfig local_;
  int64_t local_numel_ = 0;
  std::vector<TensorView> partial_parts_;  // reduce_partial_grads' tensors, of the buffer at parts_of_
  const void* parts_of_ = nullptr;
  Tensor partial_packed_;                  // ... packed for one sum, in the model backend's memory
};

}  // namespace lmt::train
