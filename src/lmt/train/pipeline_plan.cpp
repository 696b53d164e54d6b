// The Trainer's pipeline-parallel plan and its 1F1B schedule (pipeline_plan.h).
#include "lmt/train/pipeline_plan.h"

#include <algorithm>
#include <cstring>

#include "lmt/base/check.h"
#include "lmt/base/timer.h"
#include "lmt/base/trace.h"

namespace lmt::train {

Status PipelinePlan::gather(const float* stage_buffer, float* whole) {
  const std::vector<int64_t> counts = map_.stage_numels();
  int64_t total = 0, mine = 0;
  for (int s = 0; s < stages(); ++s) {
    if (s == stage()) mine = total;
    total += counts[static_cast<size_t>(s)];
  }
  if (!gathered_.view().present()) gathered_ = Tensor({total}, DType::kF32);
  float* all = gathered_.as<float>();
  std::memcpy(all + mine, stage_buffer, static_cast<size_t>(counts[static_cast<size_t>(stage())]) * sizeof(float));
  LMT_RETURN_IF_ERROR(comm_.all_gather(all, counts));
  map_.assemble(all, whole);
  return Status::Ok();
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> PipelinePlan::gather_state(
    const std::vector<std::pair<std::string, TensorView>>& stage_state) {
  std::vector<std::pair<std::string, Tensor>> out;
  const int64_t n = map_.stage_layout(stage()).total_numel();
  for (const auto& [name, v] : stage_state) {
    if (v.numel() != n || v.dtype() != DType::kF32 || !v.device().is_host())
      return Internal("pipeline state '" + name + "' is " + v.to_string() + ", not " + std::to_string(n) +
                      " host f32 elements of the stage's layout");
    Tensor whole({map_.full_layout().total_numel()}, DType::kF32);
    LMT_RETURN_IF_ERROR(gather(v.as<float>(), whole.as<float>()));
    out.emplace_back(name, std::move(whole));
  }
  return out;
}

void PipelinePlan::prepare_schedule(model::Transformer& model, int64_t B, int64_t T, const model::RunOptions& options) {
  LMT_CHECK(model.backend().device().is_host() && model.master() == DType::kF32)
      << "pipeline parallelism exchanges host buffers of an f32 model";
  model_ = &model;
  B_ = B;
  T_ = T;
  options_ = options;
  slots_.clear();
  slots_.emplace_back();
  slots_[0].model = &model;
  model.set_pipeline_role(role());
}

PipelinePlan::Slot& PipelinePlan::slot_for(int64_t micro_batch, int64_t M) {
  const int64_t K = std::min<int64_t>(M, stages() - stage());
  while (static_cast<int64_t>(slots_.size()) < K) {  // another set of activations over the same weights
    Slot s;
    s.replica = std::make_unique<model::Transformer>(model_->config(), model_->backend(), model_->master());
    s.replica->share_storage(*model_);
    s.replica->prepare(B_, T_, options_);
    s.replica->set_pipeline_role(role());
    if (const model::TensorParallel* tp = model_->tensor_parallel()) s.replica->set_tensor_parallel(*tp);
    s.model = s.replica.get();
    slots_.push_back(std::move(s));
  }
  return slots_[static_cast<size_t>(micro_batch % K)];
}

Status PipelinePlan::wait_send(Slot& s, StepTimes* time) {
  if (!s.send) return Status::Ok();
  Timer t;
  Status st = s.send->wait();
  s.send.reset();
  time->pp_wait += t.seconds();
  return st;
}

StatusOr<double> PipelinePlan::run(MicroBatchSource& source, int64_t M, float loss_scale, const StepEngineConfig& config,
                                   StepTimes* time) {
  LMT_CHECK(model_ != nullptr && M >= 1) << "PipelinePlan::run before prepare_schedule, or M = " << M;
  const int64_t warm = std::min<int64_t>(stages() - stage() - 1, M);
  const int64_t act_bytes = activation_bytes();
  double loss_sum = 0;
  int64_t next_forward = 0, next_backward = 0;
  auto forward = [&]() -> Status {
    const int64_t i = next_forward++;
    Slot& s = slot_for(i, M);
    LMT_RETURN_IF_ERROR(wait_send(s, time));  // its last gradient (or output) has left
    {
      Timer t;
      LMT_TRACE_SCOPE("data_fetch");
      LMT_ASSIGN_OR_RETURN(const data::Batch* b, source.next());
      s.batch = *b;  // the backward reads it again, after later micro-batches were fetched
      time->data += t.seconds();
    }
    if (!first()) {
      Timer t;
      LMT_TRACE_SCOPE("pp_recv");
      LMT_RETURN_IF_ERROR(comm_.recv(s.model->stage_input().data(), act_bytes, stage() - 1));
      time->pp_wait += t.seconds();
    }
    Timer t;
    const data::Batch& b = s.batch;
    const double l = s.model->forward(b.tokens.data(), b.targets.data(), config.doc_masking ? b.doc_ids.data() : nullptr,
                                      true, loss_scale, config.reset_positions ? b.positions.data() : nullptr);
    time->forward += t.seconds();
    if (last()) loss_sum += l;
    else s.send = comm_.send_async(s.model->stage_output().data(), act_bytes, stage() + 1);
    return Status::Ok();
  };
  auto backward = [&]() -> Status {
    const int64_t i = next_backward++;
    Slot& s = slot_for(i, M);
    LMT_RETURN_IF_ERROR(wait_send(s, time));  // the output it sent, before anything rewrites it
    if (!last()) {
      Timer t;
      LMT_TRACE_SCOPE("pp_recv");
      LMT_RETURN_IF_ERROR(comm_.recv(s.model->stage_grad().data(), act_bytes, stage() + 1));
      time->pp_wait += t.seconds();
    }
    Timer t;
    s.model->backward();
    time->backward += t.seconds();
    if (!first()) s.send = comm_.send_async(s.model->stage_grad().data(), act_bytes, stage() - 1);
    return Status::Ok();
  };
  for (int64_t k = 0; k < warm; ++k) LMT_RETURN_IF_ERROR(forward());
  for (int64_t k = 0; k < M - warm; ++k) {
    LMT_RETURN_IF_ERROR(forward());
    LMT_RETURN_IF_ERROR(backward());
  }
  for (int64_t k = 0; k < warm; ++k) LMT_RETURN_IF_ERROR(backward());
  for (Slot& s : slots_) LMT_RETURN_IF_ERROR(wait_send(s, time));
  // The loss lives on the last stage; every stage reports it.
  LMT_RETURN_IF_ERROR(comm_.broadcast(&loss_sum, sizeof(loss_sum), stages() - 1));
  return loss_sum;
}

int64_t PipelinePlan::activation_bytes() const {
  return B_ * T_ * model_->config().d_model * static_cast<int64_t>(dtype_size(model::activation_dtype(options_.compute)));
}

StatusOr<double> PipelinePlan::evaluate(const data::Batch& b, bool doc_masking, bool reset_positions) {
  LMT_CHECK(model_ != nullptr) << "PipelinePlan::evaluate before prepare_schedule";
  model::Transformer& m = *model_;
  if (!first()) LMT_RETURN_IF_ERROR(comm_.recv(m.stage_input().data(), activation_bytes(), stage() - 1));
  double loss = m.forward(b.tokens.data(), b.targets.data(), doc_masking ? b.doc_ids.data() : nullptr, false, 1.0f,
                          reset_positions ? b.positions.data() : nullptr);
  if (!last()) LMT_RETURN_IF_ERROR(comm_.send_async(m.stage_output().data(), activation_bytes(), stage() + 1)->wait());
  LMT_RETURN_IF_ERROR(comm_.broadcast(&loss, sizeof(loss), stages() - 1));
  return loss;
}

Status PipelinePlan::reduce_end_grads(model::Transformer& model) {
  LMT_TRACE_SCOPE("pp_end_grads");
  float* g = model.grads().as<float>();
  for (const auto& [b, e] : end_ranges()) LMT_RETURN_IF_ERROR(comm_.all_reduce_sum(g + b, e - b));
  return Status::Ok();
}

}  // namespace lmt::train
