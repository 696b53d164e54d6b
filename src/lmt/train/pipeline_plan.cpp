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

void PipelinePlan::prepare_schedule(model::Transformer& model, int64_t B, int64_t T, const model::RunOptions& options) {
  LMT_CHECK(model.master() == DType::kF32) << "pipeline parallelism exchanges the activations of an f32 model";
  if (!model.backend().device().is_host() && model_ == nullptr) {
    // A device communicator starts at its first call on device memory, collectively (NCCL: beyond two
    // ranks a point-to-point call cannot be the first): one sum over the stages starts it here.
    Tensor one({1}, DType::kF32, model.backend().allocator());
    const Status st = comm_.all_reduce_sum(one.as<float>(), 1);
    LMT_CHECK(st.ok()) << "pipeline parallelism: starting the stages' communicator: " << st.ToString();
  }
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
    if (model_->expert_parallel().enabled()) s.replica->set_expert_parallel(model_->expert_parallel());
    s.model = s.replica.get();
    slots_.push_back(std::move(s));
  }
  return slots_[static_cast<size_t>(micro_batch % K)];
}

StatusOr<double> PipelinePlan::run(MicroBatchSource& source, int64_t M, float loss_scale, const StepEngineConfig& config,
                                   StepTimes* time) {
  LMT_CHECK(model_ != nullptr && M >= 1) << "PipelinePlan::run before prepare_schedule, or M = " << M;
  const int64_t act_bytes = activation_bytes();
  LMT_CHECK(static_cast<int64_t>(model_->stage_output().bytes()) == act_bytes) << "pipeline stage input and output differ";
  // The 1F1B order of this stage's operations (reused: no allocation once it has held M).
  const int64_t warm = std::min<int64_t>(stages() - stage() - 1, M);
  std::vector<Op>& ops = ops_;
  ops.clear();
  for (int64_t k = 0; k < warm; ++k) ops.push_back({true, k});
  for (int64_t k = 0; k < M - warm; ++k) {
    ops.push_back({true, warm + k});
    ops.push_back({false, k});
  }
  for (int64_t k = M - warm; k < M; ++k) ops.push_back({false, k});
  auto needs_input = [&](const Op& op) { return op.forward ? !first() : !last(); };
  auto sends_output = [&](const Op& op) { return op.forward ? !last() : !first(); };
  // One communication phase between two operations: the previous one's output goes out and the
  // next one's input comes in, both posted before waiting on either (each neighbour does the
  // matching pair, so both are inside MPI together and the transfers move).
  auto exchange = [&](const Op* done, const Op* next) -> Status {
    Timer t;
    LMT_TRACE_SCOPE("pp_exchange");
    const void* send = nullptr;
    void* recv = nullptr;
    int to = -1, from = -1;
    if (done != nullptr && sends_output(*done)) {
      model::Transformer& m = *slot_for(done->mb, M).model;
      send = done->forward ? m.stage_output().data() : m.stage_grad().data();
      to = done->forward ? stage() + 1 : stage() - 1;
    }
    if (next != nullptr && needs_input(*next)) {
      model::Transformer& m = *slot_for(next->mb, M).model;
      recv = next->forward ? m.stage_input().data() : m.stage_grad().data();
      from = next->forward ? stage() - 1 : stage() + 1;
    }
    if (send == nullptr && recv == nullptr) return Status::Ok();
    // Posted as one pair (a device communicator groups them: NCCL's separate calls would deadlock).
    const Status st = comm_.send_recv_async(send, send ? act_bytes : 0, to, recv, recv ? act_bytes : 0, from)->wait();
    time->pp_wait += t.seconds();
    return st;
  };
  double loss_sum = 0;
  LMT_RETURN_IF_ERROR(exchange(nullptr, &ops[0]));
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    Slot& s = slot_for(op.mb, M);
    if (op.forward) {
      {
        Timer t;
        LMT_TRACE_SCOPE("data_fetch");
        LMT_ASSIGN_OR_RETURN(const data::Batch* b, source.next());
        s.batch = *b;  // the backward reads it again, after later micro-batches were fetched
        time->data += t.seconds();
      }
      Timer t;
      const data::Batch& b = s.batch;
      const double l = s.model->forward(b.tokens.data(), b.targets.data(), config.doc_masking ? b.doc_ids.data() : nullptr,
                                        true, loss_scale, config.reset_positions ? b.positions.data() : nullptr);
      time->forward += t.seconds();
      if (last()) loss_sum += l;
    } else {
      Timer t;
      s.model->backward();
      time->backward += t.seconds();
    }
    LMT_RETURN_IF_ERROR(exchange(&op, k + 1 < ops.size() ? &ops[k + 1] : nullptr));
  }
  // MoE routing statistics: the replicas ran the forwards; the stage's model reports them.
  for (Slot& sl : slots_)
    if (sl.replica) model_->take_moe_stats(*sl.replica);
  // The loss lives on the last stage; every stage reports it.
  LMT_RETURN_IF_ERROR(comm_.broadcast(&loss_sum, sizeof(loss_sum), stages() - 1));
  return loss_sum;
}

int64_t PipelinePlan::activation_bytes() const {
  return static_cast<int64_t>(model_->stage_input().bytes());  // this rank's rows under sequence parallelism
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
  // The model's own layout: a stage's with sharded experts places its trailing ends elsewhere.
  for (const auto& [b, e] : model::PipelineMap::ends_of(model.layout()))
    LMT_RETURN_IF_ERROR(comm_.all_reduce_sum(g + b, e - b));
  return Status::Ok();
}

}  // namespace lmt::train
