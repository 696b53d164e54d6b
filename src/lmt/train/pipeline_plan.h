// PipelinePlan: what the Trainer adds for pipeline parallelism (parallel.pp > 1) around one stage of
// the model (model/pipeline_split.h): the stage config it builds the Transformer of, the 1F1B
// schedule of a step's micro-batches over the pipeline group, and the collectives that keep
// checkpoints layout-independent.
//
// Schedule (one optimizer step of M micro-batches, stage s of P; PipeDream-Flush / Megatron 1F1B):
//   warm-up   min(P − s − 1, M) forwards;
//   steady    M − warm-up rounds of one forward, then the backward of the oldest micro-batch;
//   cool-down the remaining backwards.
// A forward receives the previous stage's output (its residual stream, [B·T, C] f32) unless it is
// the first stage, and sends its own to the next stage unless it is the last, which computes the
// loss instead. A backward receives d output from the next stage and sends d input to the
// previous one. Between two operations a stage posts the previous one's send and the next one's
// receive together and waits for both (Megatron's send_forward_recv_backward and its kin): the
// neighbour posts the matching pair, so over MPI both are inside the library while the bytes move
// (a send left in flight during compute would not progress). Micro-batch i runs on activation slot
// i mod K, K = min(M, P − s): the
// stage's model and K − 1 replicas sharing its parameters and gradients (Transformer::
// share_storage), each with its own activations and its own copy of the batch; at most K
// micro-batches are in flight at stage s, so a slot is free again when its next micro-batch comes.
// The bubble (the idle fraction of an ideal schedule) is (P − 1) / (M + P − 1).
//
// After the schedule, reduce_end_grads() sums the ends' gradients (embeddings, final norm, LM head)
// over the stages, so every stage applies the same update to its copy of them (and a tied
// embedding gets the gradients of both its uses). The loss is the last stage's, broadcast.
//
// Checkpoints: gather() assembles whole-model buffers on every rank of the group
// (all-gather of each stage's buffer, then PipelineMap::assemble); scatter() takes this stage's
// part, in f32 host memory (the trainer stages a device backend's buffers through the host).
//
// On a device backend the activations and their gradients stay in its memory: each exchange posts
// its send and receive as one Communicator::send_recv_async (one NCCL group on GPUs, where separate
// calls of two neighbours that both send first never finish), and prepare_schedule() starts the
// stages' device communicator with one collective sum (NCCL's start is collective).
//
// Ownership: borrows the pipeline group's communicator (the Topology's) and, after
// prepare_schedule(), the stage's model (it must outlive the plan's schedule; the replicas are the
// plan's). Threading: the Trainer's thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/loader.h"
#include "lmt/dist/communicator.h"
#include "lmt/model/pipeline_split.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"
#include "lmt/train/step_engine.h"

namespace lmt::train {

class PipelinePlan {
 public:
  // `whole`: the model the stages together hold (a tensor-parallel part under tp), pipeline_supported
  // for pp.world() stages (checked); the layers are balanced by FLOPs at seq_len (pipeline_cuts).
  // `layers`: blocks per stage when given (model::PipelineMap).
  PipelinePlan(dist::Communicator& pp, const model::ModelConfig& whole, int64_t seq_len,
               const std::vector<int64_t>& layers = {})
      : comm_(pp), map_(whole, pp.world(), seq_len, layers) {}

  int stage() const { return comm_.rank(); }
  int stages() const { return comm_.world(); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == stages() - 1; }
  const model::PipelineMap& map() const { return map_; }
  const model::ModelConfig& stage_config() const { return map_.stage_layout(stage()).config(); }
  const model::ParamLayout& whole_layout() const { return map_.full_layout(); }
  model::Transformer::PipelineRole role() const { return {first(), last()}; }
  // Ranges of this stage's buffer holding the ends (the same on every stage after reduce_end_grads).
  std::vector<std::pair<int64_t, int64_t>> end_ranges() const { return map_.end_ranges(stage()); }

  // Collective over the group: whole[whole numel] (on every rank) from every stage's buffer.
  Status gather(const float* stage_buffer, float* whole);
  void scatter(const float* whole, float* stage_buffer) const { map_.take_stage(stage(), whole, stage_buffer); }

  // The schedule runs `model` (this stage's, prepared for (B, T, options), its storage final) and
  // the replicas it makes as needed, prepared alike.
  void prepare_schedule(model::Transformer& model, int64_t B, int64_t T, const model::RunOptions& options);
  // Forward and backward of M micro-batches from `source` in 1F1B order (collective over the group);
  // gradients accumulate into the model's buffer. loss_scale as StepEngine's. Returns the sum of the
  // M micro-batch losses (the last stage's, the same on every stage). Adds to time->data, forward,
  // backward and pp_wait (blocked in receives and sends).
  StatusOr<double> run(MicroBatchSource& source, int64_t M, float loss_scale, const StepEngineConfig& config,
                       StepTimes* time);
  // The loss of one batch through every stage, without gradients (validation; collective): the last
  // stage's, the same on every stage. Uses the model's own activations (slot 0).
  StatusOr<double> evaluate(const data::Batch& b, bool doc_masking, bool reset_positions);
  // Sums the ends' gradients of `model` over the stages (collective).
  Status reduce_end_grads(model::Transformer& model);
  // The idle fraction of an ideal 1F1B schedule of M micro-batches: (P − 1) / (M + P − 1).
  double bubble_fraction(int64_t M) const {
    return static_cast<double>(stages() - 1) / static_cast<double>(M + stages() - 1);
  }
  // Activation slots (the model and its replicas) made so far.
  int slots() const { return static_cast<int>(slots_.size()); }

 private:
  struct Slot {
    model::Transformer* model = nullptr;          // the stage's model, or replica.get()
    std::unique_ptr<model::Transformer> replica;
    data::Batch batch;                             // this micro-batch's copy (read again by backward)
  };
  Slot& slot_for(int64_t micro_batch, int64_t M);
  struct Op {  // one operation of the schedule
    bool forward;
    int64_t mb;  // micro-batch
  };
  std::vector<Op> ops_;  // run()'s 1F1B order, kept to reuse its memory
  int64_t activation_bytes() const;  // one micro-batch's residual stream [B·T, C]

  dist::Communicator& comm_;
  model::PipelineMap map_;
  model::Transformer* model_ = nullptr;
  int64_t B_ = 0, T_ = 0;
  model::RunOptions options_;
  std::vector<Slot> slots_;
  Tensor gathered_;  // all stages' buffers end to end (gather), allocated on first use
};

}  // namespace lmt::train
