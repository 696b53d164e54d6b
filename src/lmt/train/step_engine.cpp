#include "lmt/train/step_engine.h"

#include <cmath>

#include "lmt/base/check.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"
#include "lmt/optim/gradients.h"
#include "lmt/train/model_split.h"

namespace lmt::train {

StatusOr<const data::Batch*> LoaderMicroBatches::next() {
  LMT_RETURN_IF_ERROR(loader_.next(&batch_));
  return &batch_;
}

StatusOr<std::unique_ptr<StepEngine>> StepEngine::create(model::Transformer& model, DataParallel& plan,
                                                         const optim::OptimizerConfig& optim,
                                                         const StepEngineConfig& config) {
  std::unique_ptr<optim::Optimizer> opt;
  if (plan.sharded()) {  // state for this rank's shard only (ZeRO 1/2)
    LMT_ASSIGN_OR_RETURN(opt, optim::Optimizer::create(optim, model.layout(), model.backend(), plan.shard_begin(),
                                                       plan.shard_end()));
  } else {
    LMT_ASSIGN_OR_RETURN(opt, optim::Optimizer::create(optim, model.layout(), model.backend()));
  }
  // Every update covers the optimizer's state range, which is the plan's shard.
  LMT_CHECK(opt->state_begin() == plan.shard_begin() && opt->state_end() == plan.shard_end())
      << "optimizer state [" << opt->state_begin() << ", " << opt->state_end() << ") is not the plan's shard ["
      << plan.shard_begin() << ", " << plan.shard_end() << ")";
  return std::unique_ptr<StepEngine>(new StepEngine(model, plan, std::move(opt), config));
}

void StepEngine::set_model_split(ModelSplit* split) {
  split_ = split;
  pipeline_ = split != nullptr ? split->pipeline() : nullptr;
}

Status StepEngine::compute_gradients(MicroBatchSource& source, const StepOptions& options, StepResult* r) {
  LMT_CHECK(options.accum >= 1) << "accum = " << options.accum;
  *r = StepResult();
  const int64_t accum = options.accum;
  // Each rank's micro-batch losses are scaled so the sum over micro-batches and data-parallel ranks
  // is the mean: the reduction sums gradients.
  const float loss_scale = 1.0f / static_cast<float>(accum * plan_.data_world());
  double loss = 0;
  // Without a pipeline every micro-batch runs one whole backward before any gradient is read, so the
  // blocks' weight matrices need no zeros: the first backward writes them (Transformer::zero_grads).
  plan_.zero_grads(model_, /*defer_block_matrices=*/pipeline_ == nullptr);
  if (pipeline_ != nullptr) {  // 1F1B over the stages; no bucketed overlap (the last backward is a replica's)
    LMT_ASSIGN_OR_RETURN(const double sum, pipeline_->run(source, accum, loss_scale, config_, &r->time));
    loss = sum / static_cast<double>(accum);
  }
  for (int64_t i = 0; i < accum && pipeline_ == nullptr; ++i) {
    Timer t;
    const data::Batch* b = nullptr;
    {
      LMT_TRACE_SCOPE("data_fetch");
      LMT_ASSIGN_OR_RETURN(b, source.next());
    }
    r->time.data += t.seconds();
    t.reset();
    const double l = model_.forward(b->tokens.data(), b->targets.data(), config_.doc_masking ? b->doc_ids.data() : nullptr,
                                    true, loss_scale, config_.reset_positions ? b->positions.data() : nullptr);
    r->time.forward += t.seconds();
    t.reset();
    if (i + 1 == accum) plan_.arm(model_);  // bucketed gradient reduction during the last backward
    model_.backward();
    r->time.backward += t.seconds();
    loss += l / static_cast<double>(accum);
  }
  if (split_ != nullptr) {  // gradients held in parts (pipeline ends, tensor-parallel QK-norms)
    Timer t;
    LMT_RETURN_IF_ERROR(split_->reduce_partial_grads(model_));
    r->time.pp_wait += t.seconds();
  }
  {
    // A device communicator's waits order the device, not the host: for benchmarks the reduction's
    // time is the device's, from the end of backward to the end of the reduction (a host wait on
    // each side; StepEngineConfig::time_device_reduction).
    const bool device_wait = device_reduction();
    if (device_wait) model_.backend().synchronize();
    Timer t;
    LMT_RETURN_IF_ERROR(plan_.finish(model_, options.full_grads));
    if (device_wait) model_.backend().synchronize();
    LMT_ASSIGN_OR_RETURN(r->loss, plan_.mean(loss));
    r->time.reduce = t.seconds();
    r->time.zero3_comm = plan_.take_zero3_comm_seconds();
  }
  {
    LMT_TRACE_SCOPE("clip");
    Timer t;
    LMT_ASSIGN_OR_RETURN(r->grad_norm, plan_.grad_norm(model_));
    r->time.norm = t.seconds();
  }
  r->clip_factor = optim::clip_factor(r->grad_norm, config_.grad_clip);
  r->finite = std::isfinite(r->loss) && std::isfinite(r->grad_norm);
  return Status::Ok();
}

Status StepEngine::apply_update(float lr_mult, int64_t update_number, StepResult* r) {
  LMT_TRACE_SCOPE("optimizer_step");
  Timer t;
  // A checkpoint's snapshot of the parameters and optimizer state may still be copying them out
  // beside this step (Backend::snapshot_async): the update waits for it on the device.
  model_.backend().join_snapshots();
  // The shard is the optimizer's state range (create()), which step() covers by default.
  optimizer_->step(plan_.update_params(model_), plan_.update_grads(model_), plan_.update_mirror(model_), lr_mult, r->clip_factor, update_number);
  r->time.update = t.seconds();
  t.reset();
  LMT_RETURN_IF_ERROR(plan_.after_update(model_));
  r->time.gather = t.seconds();
  r->updated = true;
  return Status::Ok();
}

Status StepEngine::step(MicroBatchSource& source, const StepOptions& options, float lr_mult, int64_t update_number,
                        StepResult* r) {
  LMT_RETURN_IF_ERROR(compute_gradients(source, options, r));
  return apply_update(lr_mult, update_number, r);
}

StatusOr<double> StepEngine::time_reduction_alone() {
  const bool device_wait = device_reduction();
  if (device_wait) model_.backend().synchronize();
  plan_.arm(model_);
  Timer t;
  LMT_RETURN_IF_ERROR(plan_.finish(model_));
  if (device_wait) model_.backend().synchronize();
  return t.seconds();
}

bool StepEngine::device_reduction() const {
  return config_.time_device_reduction && !model_.backend().device().is_host() && plan_.comm().world() > 1;
}

}  // namespace lmt::train
