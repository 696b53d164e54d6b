// Pipeline parallelism: stage cuts, stage configs and the whole <-> stage map (pipeline_split.h).
#include "lmt/model/pipeline_split.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "lmt/base/check.h"
#include "lmt/model/flops.h"

namespace lmt::model {
namespace {

ModelConfig stage_config(const ModelConfig& full, int stages, int s, const std::vector<int64_t>& cuts) {
  ModelConfig c = full;
  c.name = full.name + "/pp" + std::to_string(s) + "of" + std::to_string(stages);
  c.n_layers = cuts[static_cast<size_t>(s) + 1] - cuts[static_cast<size_t>(s)];
  c.moe.first_layer = cuts[static_cast<size_t>(s)];  // MoE layers stay where they were
  c.moe.whole_layers = full.n_layers;
  return c;
}

}  // namespace

Status pipeline_supported(const ModelConfig& full, int stages) {
  const std::string at = "parallel.pp = " + std::to_string(stages) + " for model '" + full.name + "': ";
  if (stages < 1 || stages > full.n_layers)
    return InvalidArgument(at + "needs 1 <= stages <= n_layers = " + std::to_string(full.n_layers),
                           "choose parallel.pp at most the number of layers");
  if (stages == 1) return Status::Ok();
  if (full.nope_every > 0)
    return Unimplemented(at + "nope_every chooses layers by their index, which a stage renumbers from 0",
                         "use parallel.pp = 1 for this model");
  return Status::Ok();
}

std::vector<int64_t> pipeline_cuts(const ModelConfig& c, int stages, int64_t seq_len) {
  const int64_t L = c.n_layers, P = stages;
  LMT_CHECK(P >= 1 && P <= L) << "pipeline_cuts: " << P << " stages of " << L << " layers";
  // Costs in units of one block's forward FLOPs per token.
  double head = 0;
  if (seq_len > 0) {
    const FlopsPerToken f = flops_per_token(c, seq_len);
    const double block = (f.forward - f.lm_head_forward) / static_cast<double>(L);
    head = block > 0 ? f.lm_head_forward / block : 0;
  }
  auto first_stages_max = [&](int64_t rest) {  // blocks of the largest of the first P - 1 stages
    return P == 1 ? 0 : (rest + P - 2) / (P - 1);
  };
  int64_t last = P == 1 ? L : 1;
  double best = 1e300;
  for (int64_t n = 1; P > 1 && n <= L - (P - 1); ++n) {
    const double worst = std::max(static_cast<double>(first_stages_max(L - n)), static_cast<double>(n) + head);
    if (worst < best - 1e-9) best = worst, last = n;
  }
  std::vector<int64_t> cuts(static_cast<size_t>(P) + 1, 0);
  const int64_t rest = L - last;
  for (int64_t s = 0; s + 1 < P; ++s)
    cuts[static_cast<size_t>(s) + 1] = cuts[static_cast<size_t>(s)] + rest / (P - 1) + (s < rest % (P - 1) ? 1 : 0);
  cuts[static_cast<size_t>(P)] = L;
  return cuts;
}

PipelineMap::PipelineMap(const ModelConfig& full, int stages, int64_t seq_len, const std::vector<int64_t>& layers)
    : full_(full), cuts_(pipeline_cuts(full, stages, seq_len)) {
  if (!layers.empty()) {
    LMT_CHECK(static_cast<int>(layers.size()) == stages) << layers.size() << " stage sizes for " << stages << " stages";
    for (int s = 0; s < stages; ++s) {
      LMT_CHECK(layers[static_cast<size_t>(s)] >= 1) << "pipeline stage " << s << " of " << layers[static_cast<size_t>(s)] << " blocks";
      cuts_[static_cast<size_t>(s) + 1] = cuts_[static_cast<size_t>(s)] + layers[static_cast<size_t>(s)];
    }
    LMT_CHECK(cuts_.back() == full.n_layers) << "pipeline stages of " << cuts_.back() << " blocks for " << full.n_layers;
  }
  const Status ok = pipeline_supported(full, stages);
  LMT_CHECK(ok.ok()) << ok.ToString();
  for (int s = 0; s < stages; ++s) stage_layouts_.emplace_back(stage_config(full, stages, s, cuts_));
}

std::vector<int64_t> PipelineMap::stage_numels() const {
  std::vector<int64_t> n;
  for (const ParamLayout& l : stage_layouts_) n.push_back(l.total_numel());
  return n;
}

std::vector<std::vector<const ParamInfo*>> PipelineMap::by_layer(const ParamLayout& layout) {
  std::vector<std::vector<const ParamInfo*>> out(static_cast<size_t>(layout.config().n_layers) + 1);
  for (const ParamInfo& p : layout.params()) out[static_cast<size_t>(p.layer + 1)].push_back(&p);
  return out;
}

void PipelineMap::copy(int s, float* full, float* stage, bool to_full, bool ends) const {
  LMT_CHECK(s >= 0 && s < stages()) << "pipeline stage " << s << " of " << stages();
  const auto f = by_layer(full_), st = by_layer(stage_layout(s));
  for (size_t l = 0; l < st.size(); ++l) {
    if (l == 0 && !ends) continue;
    const auto& fl = f[l == 0 ? 0 : static_cast<size_t>(cuts_[static_cast<size_t>(s)]) + l];
    LMT_CHECK(fl.size() == st[l].size()) << "pipeline map: layer " << l << " has " << st[l].size() << " vs " << fl.size()
                                         << " tensors";
    for (size_t i = 0; i < fl.size(); ++i) {
      LMT_CHECK(fl[i]->numel == st[l][i]->numel) << fl[i]->name << " vs " << st[l][i]->name;
      float* fp = full + fl[i]->offset;
      float* sp = stage + st[l][i]->offset;
      const size_t bytes = static_cast<size_t>(fl[i]->numel) * sizeof(float);
      if (to_full) std::memcpy(fp, sp, bytes);
      else std::memcpy(sp, fp, bytes);
    }
  }
}

void PipelineMap::take_stage(int s, const float* full, float* stage) const {
  std::memset(stage, 0, static_cast<size_t>(stage_layout(s).total_numel()) * sizeof(float));
  copy(s, const_cast<float*>(full), stage, /*to_full=*/false, /*ends=*/true);
}

void PipelineMap::put_stage(int s, const float* stage, float* full, bool ends) const {
  copy(s, full, const_cast<float*>(stage), /*to_full=*/true, ends);
}

void PipelineMap::assemble(const float* stages_data, float* full) const {
  std::memset(full, 0, static_cast<size_t>(full_.total_numel()) * sizeof(float));
  int64_t off = 0;
  for (int s = 0; s < stages(); ++s) {
    put_stage(s, stages_data + off, full, /*ends=*/s == 0);
    off += stage_layout(s).total_numel();
  }
}

std::vector<std::pair<int64_t, int64_t>> PipelineMap::ends_of(const ParamLayout& layout) {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (const ParamInfo& p : layout.params())
    if (p.layer < 0) r.emplace_back(p.offset, p.offset + p.numel);
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace lmt::model
