// Tensor and pipeline parallelism composed (model_split.h).
#include "lmt/train/model_split.h"

#include <cstring>

#include "lmt/model/tensor_parallel.h"

namespace lmt::train {

ModelSplit::ModelSplit(dist::Topology& topology, const model::ModelConfig& whole, int64_t seq_len)
    : topo_(topology), whole_(whole) {
  if (topology.tp_size() > 1) tp_ = std::make_unique<TensorParallelPlan>(topology.tp(), whole);
  const model::ModelConfig& part = tp_ ? tp_->shard_config() : whole;
  if (topology.pp_size() > 1) pp_ = std::make_unique<PipelinePlan>(topology.pp(), part, seq_len);
  local_ = pp_ ? pp_->stage_config() : part;
}

void ModelSplit::scatter(const float* whole, float* local) const {
  if (tp_ && pp_) {
    std::vector<float> part(static_cast<size_t>(pp_->whole_layout().total_numel()));
    tp_->scatter(whole, part.data());
    pp_->scatter(part.data(), local);
  } else if (tp_) {
    tp_->scatter(whole, local);
  } else if (pp_) {
    pp_->scatter(whole, local);
  } else {
    std::memcpy(local, whole, static_cast<size_t>(whole_.total_numel()) * sizeof(float));
  }
}

Status ModelSplit::gather(const float* local, float* whole) {
  if (tp_ && pp_) {
    std::vector<float> part(static_cast<size_t>(pp_->whole_layout().total_numel()));
    LMT_RETURN_IF_ERROR(pp_->gather(local, part.data()));
    return tp_->gather(part.data(), whole);
  }
  if (tp_) return tp_->gather(local, whole);
  if (pp_) return pp_->gather(local, whole);
  std::memcpy(whole, local, static_cast<size_t>(whole_.total_numel()) * sizeof(float));
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

void ModelSplit::add_groups(DataParallel& dp, const model::ParamLayout& local) const {
  if (tp_) dp.add_model_parallel_group(topo_.tp(), model::tensor_parallel_replicated_ranges(local));
  if (pp_) dp.add_model_parallel_group(topo_.pp(), pp_->end_ranges());
}

}  // namespace lmt::train
