// The trainer's MoE bookkeeping across ranks (moe_state.h).
#include "lmt/train/moe_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lmt/base/check.h"

namespace lmt::train {

Status sum_moe_stats_over_ranks(dist::Communicator& dp, int world, model::Transformer& m) {
  if (world <= 1) return Status::Ok();
  std::vector<double> buf;
  for (const model::MoeStepStats& s : m.moe_stats()) {
    for (int64_t x : s.load) buf.push_back(static_cast<double>(x));
    buf.push_back(static_cast<double>(s.dropped));
    buf.push_back(s.aux_loss / world);
    buf.push_back(s.z_loss / world);
  }
  LMT_RETURN_IF_ERROR(dp.all_reduce_sum(buf.data(), static_cast<int64_t>(buf.size())));
  size_t i = 0;
  for (model::MoeStepStats& s : m.moe_stats()) {
    for (int64_t& x : s.load) x = static_cast<int64_t>(std::llround(buf[i++]));
    s.dropped = static_cast<int64_t>(std::llround(buf[i++]));
    s.aux_loss = buf[i++];
    s.z_loss = buf[i++];
  }
  return Status::Ok();
}

StatusOr<std::vector<model::MoeStepStats>> whole_moe_stats(const model::Transformer& m, const model::ModelConfig& whole,
                                                           dist::Communicator* pp) {
  const model::ModelConfig& c = m.config();
  const int64_t first = c.moe.first_layer, E = whole.moe.num_experts, L = whole.n_layers;
  LMT_CHECK(c.moe.num_experts == E && first + c.n_layers <= L)
      << "MoE statistics of model '" << c.name << "' as part of '" << whole.name << "'";
  std::vector<model::MoeStepStats> out(static_cast<size_t>(L));
  for (int64_t l = 0; l < c.n_layers; ++l) out[static_cast<size_t>(first + l)] = m.moe_stats()[static_cast<size_t>(l)];
  if (pp == nullptr || pp->world() <= 1) return out;
  // Per whole layer: E loads, dropped, aux, z, forwards (zeros for the other stages' layers).
  const int64_t W = E + 4;
  std::vector<double> buf(static_cast<size_t>(L * W), 0.0);
  for (int64_t l = 0; l < L; ++l) {
    const model::MoeStepStats& s = out[static_cast<size_t>(l)];
    double* b = buf.data() + l * W;
    for (size_t e = 0; e < s.load.size(); ++e) b[e] = static_cast<double>(s.load[e]);
    b[E] = static_cast<double>(s.dropped);
    b[E + 1] = s.aux_loss;
    b[E + 2] = s.z_loss;
    b[E + 3] = static_cast<double>(s.forwards);
  }
  LMT_RETURN_IF_ERROR(pp->all_reduce_sum(buf.data(), static_cast<int64_t>(buf.size())));
  for (int64_t l = 0; l < L; ++l) {
    const double* b = buf.data() + l * W;
    model::MoeStepStats& s = out[static_cast<size_t>(l)];
    s = model::MoeStepStats();
    s.forwards = static_cast<int64_t>(std::llround(b[E + 3]));
    if (s.forwards == 0) continue;
    s.load.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) s.load[e] = static_cast<int64_t>(std::llround(b[e]));
    s.dropped = static_cast<int64_t>(std::llround(b[E]));
    s.aux_loss = b[E + 1];
    s.z_loss = b[E + 2];
  }
  return out;
}

nlohmann::json moe_record(const model::ModelConfig& whole, const std::vector<model::MoeStepStats>& stats) {
  nlohmann::json layers = nlohmann::json::array();
  double aux = 0, zl = 0, worst = 0;
  int64_t dropped = 0;
  for (int64_t l = 0; l < whole.n_layers; ++l) {
    if (!whole.moe.is_moe_layer(l)) continue;
    const model::MoeStepStats& s = stats[static_cast<size_t>(l)];
    layers.push_back({{"layer", l}, {"load", s.load}, {"imbalance", s.imbalance()}, {"dropped", s.dropped},
                      {"aux_loss", s.aux_mean()}, {"z_loss", s.z_mean()}});
    aux += s.aux_mean();
    zl += s.z_mean();
    dropped += s.dropped;
    worst = std::max(worst, s.imbalance());
  }
  return {{"layers", layers}, {"aux_loss", aux}, {"z_loss", zl}, {"dropped", dropped}, {"max_imbalance", worst}};
}

Tensor whole_router_bias_buffer(const model::Transformer& m, const model::ModelConfig& whole) {
  if (!m.router_bias(0).present()) return Tensor();
  return Tensor({whole.n_layers, whole.moe.num_experts}, DType::kF32);  // zero-filled
}

StatusOr<Tensor> whole_router_bias(const model::Transformer& m, const model::ModelConfig& whole, dist::Communicator* pp) {
  Tensor t = whole_router_bias_buffer(m, whole);
  if (!t.view().present()) return t;
  const model::ModelConfig& c = m.config();
  std::memcpy(t.as<float>() + c.moe.first_layer * c.moe.num_experts, m.router_bias(0).data(),
              static_cast<size_t>(c.n_layers * c.moe.num_experts) * sizeof(float));
  // Each stage's rows, zeros elsewhere: the sum is the whole bias, exactly.
  if (pp != nullptr && pp->world() > 1) LMT_RETURN_IF_ERROR(pp->all_reduce_sum(t.as<float>(), t.view().numel()));
  return t;
}

void set_router_bias(model::Transformer& m, const TensorView& whole) {
  const TensorView own = m.router_bias(0);
  if (!own.present() || !whole.present()) return;
  const model::ModelConfig& c = m.config();
  LMT_CHECK(whole.dim(1) == c.moe.num_experts && c.moe.first_layer + c.n_layers <= whole.dim(0))
      << "router bias " << whole.to_string() << " for model '" << c.name << "'";
  std::memcpy(own.data(), whole.as<float>() + c.moe.first_layer * c.moe.num_experts,
              static_cast<size_t>(c.n_layers * c.moe.num_experts) * sizeof(float));
  m.router_bias_written();
}

TensorView own_router_bias(const model::Transformer& m) {
  const TensorView b0 = m.router_bias(0);
  if (!b0.present()) return TensorView();
  return TensorView(b0.data(), Shape{m.config().n_layers, m.config().moe.num_experts}, DType::kF32, b0.device());
}

void add_router_bias(const TensorView& bias, std::vector<std::pair<std::string, TensorView>>& state) {
  if (bias.present()) state.emplace_back(kRouterBiasState, bias);
}

}  // namespace lmt::train
