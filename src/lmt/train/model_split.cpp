// Tensor and pipeline parallelism composed, or sharded experts (model_split.h).
#include "lmt/train/model_split.h"

#include <cstring>

#include "lmt/base/check.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/train/packed_sum.h"

namespace lmt::train {

ModelSplit::ModelSplit(dist::Topology& topology, const model::ModelConfig& whole, int64_t seq_len,
                       const std::vector<int64_t>& pp_layers, dist::Communicator* expert_shards)
    : topo_(topology), whole_(whole) {
  if (topology.tp_size() > 1) tp_ = std::make_unique<TensorParallelPlan>(topology.tp(), whole);
  const model::ModelConfig& part = tp_ ? tp_->shard_config() : whole;
  if (topology.pp_size() > 1) pp_ = std::make_unique<PipelinePlan>(topology.pp(), part, seq_len, pp_layers);
  const model::ModelConfig& stage = pp_ ? pp_->stage_config() : part;
  if (expert_shards != nullptr) ep_ = std::make_unique<ExpertShardPlan>(*expert_shards, stage);
  local_ = ep_ ? ep_->local_config() : stage;
  local_numel_ = model::ParamLayout(local_).total_numel();
}

// whole -(tp)-> part -(pp)-> stage -(ep)-> local; each step is a copy when its split is absent.
void ModelSplit::scatter(const float* whole, float* local) const {
  const float* at = whole;
  std::vector<float> part, stage;
  if (tp_) {
    part.resize(static_cast<size_t>(tp_->map().shard_layout().total_numel()));
    tp_->scatter(at, part.data());
    at = part.data();
  }
  if (pp_) {
    stage.resize(static_cast<size_t>(pp_->map().stage_layout(pp_->stage()).total_numel()));
    pp_->scatter(at, stage.data());
    at = stage.data();
  }
  if (ep_) ep_->scatter(at, local);
  else std::memcpy(local, at, static_cast<size_t>(local_numel_) * sizeof(float));
}

Status ModelSplit::gather(const float* local, float* whole) {
  const float* at = local;
  std::vector<float> stage, part;
  if (ep_) {
    stage.resize(static_cast<size_t>(ep_->whole_layout().total_numel()));
    LMT_RETURN_IF_ERROR(ep_->gather(at, stage.data()));
    at = stage.data();
  }
  if (pp_) {
    part.resize(static_cast<size_t>(pp_->whole_layout().total_numel()));
    LMT_RETURN_IF_ERROR(pp_->gather(at, part.data()));
    at = part.data();
  }
  if (tp_) return tp_->gather(at, whole);
  std::memcpy(whole, at, static_cast<size_t>(whole_.total_numel()) * sizeof(float));
  return Status::Ok();
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> ModelSplit::gather_state(
    const std::vector<std::pair<std::string, TensorView>>& local_state) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, v] : local_state) {
    if (v.dtype() != DType::kF32 || !v.device().is_host())
      return Internal("model state '" + name + "' is " + v.to_string() + ", not host f32");
    Tensor whole({whole_.total_numel()}, DType::kF32);
    LMT_RETURN_IF_ERROR(gather(v.as<float>(), whole.as<float>()));
    out.emplace_back(name, std::move(whole));
  }
  return out;
}

Status ModelSplit::reduce_partial_grads(model::Transformer& m) {
  if (ep_) LMT_RETURN_IF_ERROR(ep_->reduce_partial_grads(m));  // sums are linear: any order
  if (pp_) LMT_RETURN_IF_ERROR(pp_->reduce_end_grads(m));
  if (!tp_) return Status::Ok();
  // The tensors, found once per gradient buffer (its views do not move between steps).
  if (parts_of_ != m.grads().data()) {
    parts_of_ = m.grads().data();
    partial_parts_.clear();
    // QK-norm weights: shared by the heads the ranks split. Under sequence parallelism also every
    // norm and the position embedding, which each rank saw only its rows of.
    const bool sp = m.tensor_parallel() != nullptr && m.tensor_parallel()->sequence_parallel;
    const model::ModelViews g = m.grad_views();
    auto add = [&](const TensorView& v) {
      if (v.present()) partial_parts_.push_back(v);
    };
    for (const model::BlockViews& b : g.blocks) {
      add(b.q_norm_w);
      add(b.k_norm_w);
      if (sp)
        for (const TensorView& v : {b.attn_norm_w, b.attn_norm_b, b.ffn_norm_w, b.ffn_norm_b}) add(v);
    }
    if (sp)
      for (const TensorView& v : {g.pos_embed, g.final_norm_w, g.final_norm_b}) add(v);
  }
  return sum_packed(m.backend(), topo_.tp(), partial_parts_, partial_packed_);
}

void ModelSplit::add_groups(DataParallel& dp, const model::ParamLayout& local) const {
  if (ep_) dp.add_model_parallel_group(ep_->comm(), ep_->replicated_ranges());
  if (tp_) dp.add_model_parallel_group(topo_.tp(), model::tensor_parallel_replicated_ranges(local));
  if (pp_) dp.add_model_parallel_group(topo_.pp(), model::PipelineMap::ends_of(local));
}

}  // namespace lmt::train
