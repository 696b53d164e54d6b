// StepEngine: one optimizer step of a model under a parallel plan, the protocol every caller used to
// repeat (the Trainer, `lmtrain bench train`):
//
//   compute_gradients()  zero the gradients; `accum` micro-batches from a MicroBatchSource, each
//                        forward (loss scaled by 1/(accum · dp), so the sum over data-parallel
//                        ranks is the mean) and backward; the plan's gradient reduction (armed on
//                        the last micro-batch so buckets overlap its backward, finished after it);
//                        the mean loss over ranks; the global gradient norm and the clip factor.
//   apply_update()       the optimizer's fused update of this rank's shard (clipping folded in as
//                        its gradient scale; refreshes the bf16 mirror), then the plan's parameter
//                        gather (ZeRO 1/2).
//
// The caller decides between the two (the Trainer's stability guards skip the update of a bad
// step); step() runs both. The parallel plan today is DataParallel (data_parallel.h) over the
// topology's dp group (under ZeRO 3 it also gathers each block inside forward/backward through
// the model's hooks, and the engine zeroes and updates what the plan names: zero_grads(),
// update_params()); tensor/pipeline plans are meant to plug in at the same two points.
// The optimizer is created once, over the plan's shard: [shard_begin, shard_end) of the flat
// buffer with state for only that slice when the plan shards (ZeRO 1/2), the whole buffer
// otherwise; every update then covers exactly its state range.
//
// Bit-for-bit the sequence of calls the Trainer made before this class existed (same order, same
// scale, same summation), so losses and parameters are unchanged. No heap allocation per step.
//
// Ownership: borrows the model and the plan (both must outlive it), owns the optimizer.
// Threading: the thread that drives the model and the plan's communicator.
#pragma once

#include <cstdint>
#include <memory>

#include "lmt/base/status.h"
#include "lmt/data/loader.h"
#include "lmt/model/transformer.h"
#include "lmt/optim/optimizer.h"
#include "lmt/train/data_parallel.h"

namespace lmt::train {

// Supplies the micro-batches of a step, each B × T as the model was prepared for.
class MicroBatchSource {
 public:
  virtual ~MicroBatchSource() = default;
  // The next micro-batch; valid until the next call. An error ends the step (nothing is updated).
  virtual StatusOr<const data::Batch*> next() = 0;
};

// Micro-batches from a data::Loader (the Trainer's): this rank's slice of the data.
class LoaderMicroBatches final : public MicroBatchSource {
 public:
  explicit LoaderMicroBatches(data::Loader& loader) : loader_(loader) {}
  StatusOr<const data::Batch*> next() override;

 private:
  data::Loader& loader_;
  data::Batch batch_;  // reused: the loader refills its vectors in place
};

// Seconds spent in each part of a step on this rank.
struct StepTimes {
  double data = 0;      // MicroBatchSource::next
  double forward = 0;
  double backward = 0;  // including what the reduction launched from backward's hook costs it
  double reduce = 0;    // gradient reduction left after backward, and the loss mean over ranks
  double norm = 0;      // global gradient norm
  double update = 0;    // optimizer pass (and bf16 mirror refresh)
  double gather = 0;    // parameter gather after the update (ZeRO 1/2)
  double zero3_comm = 0;  // ZeRO 3: gathers waited on and reduce-scatters, inside forward and backward
  double tp_comm = 0;     // tensor parallelism: the group's sums inside forward and backward (its owner fills it)
  double pp_wait = 0;     // pipeline parallelism: blocked receiving from or sending to the neighbour stages
                          // (the bubble and the transfers), outside forward and backward; and the sums
                          // of gradients held in parts (ModelSplit::reduce_partial_grads)
};

struct StepResult {
  double loss = 0;         // mean over the micro-batches and the data-parallel ranks
  double grad_norm = 0;    // global L2 norm of the reduced gradients, before clipping
  float clip_factor = 1;   // optim::clip_factor(grad_norm, grad_clip): the update's gradient scale
  bool finite = true;      // loss and grad_norm are finite (an update would poison the weights)
  bool updated = false;    // apply_update() ran
  StepTimes time;
};

struct StepOptions {
  int64_t accum = 1;        // micro-batches in this step (>= 1)
  bool full_grads = false;  // every rank keeps all reduced gradients even where the plan would
                            // reduce only its shard (ZeRO 1: per-layer gradient norms need them)
};

struct StepEngineConfig {
  float grad_clip = 1.0f;    // max global norm; <= 0: no clipping
  bool doc_masking = false;  // pass the micro-batches' doc_ids to the model (attention within documents)
  bool reset_positions = false;  // pass their positions (restarting at each document) instead of n % T
  // Benchmarks: on a device over several processes, wait for the device on both sides of the
  // gradient reduction, so its time (StepResult's reduce, time_reduction_alone()) is the device's.
  // Training leaves it off: the reduction is ordered on the device and the host does not wait.
  bool time_device_reduction = false;
};

class ModelSplit;    // model_split.h
class PipelinePlan;  // pipeline_plan.h

class StepEngine {
 public:
  // Creates the optimizer over the plan's shard (errors: optim::validate's, naming the key).
  static StatusOr<std::unique_ptr<StepEngine>> create(model::Transformer& model, DataParallel& plan,
                                                      const optim::OptimizerConfig& optim, const StepEngineConfig& config);

  // Fills r->loss, grad_norm, clip_factor, finite and the times of data, forward, backward, reduce
  // and norm; r->updated = false. Collective over the plan's communicator.
  Status compute_gradients(MicroBatchSource& source, const StepOptions& options, StepResult* r);
  // lr_mult: the schedule's multiplier; update_number: 1-based count of updates applied (AdamW's
  // bias correction), so a resumed run passes its true count. Uses r->clip_factor; fills the
  // update and gather times and sets r->updated. Collective (the gather) under ZeRO 1/2.
  Status apply_update(float lr_mult, int64_t update_number, StepResult* r);
  // Both, always updating (benchmarks and callers without stability guards).
  Status step(MicroBatchSource& source, const StepOptions& options, float lr_mult, int64_t update_number, StepResult* r);

  // The plan's gradient reduction once more, with no backward to hide behind: seconds, for
  // benchmarks (what `grad reduce` would cost without overlap). Collective; gradients end reduced
  // again (their values are then meaningless for an update).
  StatusOr<double> time_reduction_alone();

  // Tensor and pipeline parallelism (model_split.h): after the micro-batches' backward,
  // compute_gradients sums the gradients the ranks hold parts of (ModelSplit::reduce_partial_grads);
  // under pipeline parallelism it runs the plan's 1F1B schedule over the step's micro-batches
  // instead of one forward and backward after another (the schedule must be prepared on this
  // engine's model). Borrows `split`.
  void set_model_split(ModelSplit* split);

  optim::Optimizer& optimizer() { return *optimizer_; }
  DataParallel& plan() { return plan_; }

 private:
  StepEngine(model::Transformer& model, DataParallel& plan, std::unique_ptr<optim::Optimizer> optimizer,
             const StepEngineConfig& config)
      : model_(model), plan_(plan), optimizer_(std::move(optimizer)), config_(config) {}

  // Whether the reduction is timed with host waits (config_.time_device_reduction on a device over
  // several processes).
  bool device_reduction() const;

  model::Transformer& model_;
  DataParallel& plan_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  StepEngineConfig config_;
  ModelSplit* split_ = nullptr;
  PipelinePlan* pipeline_ = nullptr;  // split_'s, if it has one
};

}  // namespace lmt::train
