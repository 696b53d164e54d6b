// Expert parallelism with sharded experts (expert_shard_plan.h).
#include "lmt/train/expert_shard_plan.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "lmt/base/check.h"
#include "lmt/base/trace.h"
#include "lmt/train/packed_sum.h"

namespace lmt::train {
namespace {

bool is_routed_expert(const model::ParamInfo& p) { return p.name.find(".mlp.experts.") != std::string::npos; }

}  // namespace

model::ModelConfig expert_shard_config(const model::ModelConfig& whole, int size, int rank) {
  LMT_CHECK(whole.moe.enabled() && size >= 1 && whole.moe.num_experts % size == 0 && rank >= 0 && rank < size)
      << "experts of model '" << whole.name << "' over " << size << " expert-parallel ranks";
  model::ModelConfig c = whole;
  if (size == 1) return c;
  c.name = whole.name + "/ep" + std::to_string(rank) + "of" + std::to_string(size);
  c.moe.local_experts = whole.moe.num_experts / size;
  c.moe.first_expert = rank * c.moe.local_experts;
  return c;
}

ExpertShardPlan::ExpertShardPlan(dist::Communicator& ep, const model::ModelConfig& whole) : comm_(ep), whole_(whole) {
  for (int r = 0; r < ep.world(); ++r) locals_.emplace_back(expert_shard_config(whole, ep.world(), r));
  for (const model::ParamInfo& p : locals_[static_cast<size_t>(rank())].params()) {
    if (is_routed_expert(p)) continue;
    if (!replicated_.empty() && replicated_.back().second == p.offset) replicated_.back().second = p.offset + p.numel;
    else replicated_.emplace_back(p.offset, p.offset + p.numel);
  }
}

void ExpertShardPlan::copy(int r, float* whole, float* local, bool to_whole, bool replicated) const {
  std::unordered_map<std::string, const model::ParamInfo*> at;
  for (const model::ParamInfo& p : whole_.params()) at.emplace(p.name, &p);
  for (const model::ParamInfo& p : locals_[static_cast<size_t>(r)].params()) {
    if (!replicated && !is_routed_expert(p)) continue;
    const auto it = at.find(p.name);
    LMT_CHECK(it != at.end() && it->second->numel == p.numel) << "expert shard: no whole-model tensor " << p.name;
    float* w = whole + it->second->offset;
    float* l = local + p.offset;
    const size_t bytes = static_cast<size_t>(p.numel) * sizeof(float);
    if (to_whole) std::memcpy(w, l, bytes);
    else std::memcpy(l, w, bytes);
  }
}

void ExpertShardPlan::scatter(const float* whole, float* local) const {
  std::memset(local, 0, static_cast<size_t>(locals_[static_cast<size_t>(rank())].total_numel()) * sizeof(float));
  copy(rank(), const_cast<float*>(whole), local, /*to_whole=*/false, /*replicated=*/true);
}

Status ExpertShardPlan::gather(const float* local, float* whole) {
  const int64_t n = locals_[static_cast<size_t>(rank())].total_numel();  // the same on every rank
  if (!gathered_.view().present()) gathered_ = Tensor({n * size()}, DType::kF32);
  float* all = gathered_.as<float>();
  std::memcpy(all + rank() * n, local, static_cast<size_t>(n) * sizeof(float));
  LMT_RETURN_IF_ERROR(comm_.all_gather(all, std::vector<int64_t>(static_cast<size_t>(size()), n)));
  std::memset(whole, 0, static_cast<size_t>(whole_.total_numel()) * sizeof(float));
  for (int r = 0; r < size(); ++r) copy(r, whole, all + r * n, /*to_whole=*/true, /*replicated=*/r == 0);
  return Status::Ok();
}

Status ExpertShardPlan::reduce_partial_grads(model::Transformer& m) {
  LMT_TRACE_SCOPE("ep_grad_sum");
  const TensorView g = m.grads();
  std::vector<TensorView> parts;
  parts.reserve(replicated_.size());
  for (const auto& [b, e] : replicated_) parts.push_back(g.slice_rows(b, e));
  return sum_packed(m.backend(), comm_, parts, packed_);
}

}  // namespace lmt::train
