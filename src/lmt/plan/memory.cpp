#include "lmt/plan/memory.h"

#include <algorithm>

namespace lmt::plan {
namespace {

using metrics::Precision;

// Parameters outside the layers: embeddings (+ learned positions), final norm, untied LM head.
struct ParamSplit {
  double embedding = 0, final_norm = 0, head = 0, per_layer = 0;
};

ParamSplit split_params(const model::ModelConfig& c) {
  ParamSplit s;
  const double C = static_cast<double>(c.d_model), V = static_cast<double>(c.vocab_size);
  s.embedding = V * C + (c.positions == model::PositionKind::kLearned ? static_cast<double>(c.max_seq_len) * C : 0);
  s.final_norm = c.has_norm_bias() ? 2 * C : C;
  s.head = c.tied_embeddings ? 0 : V * C;
  s.per_layer = (static_cast<double>(c.param_count()) - s.embedding - s.final_norm - s.head) /
                static_cast<double>(c.n_layers);
  return s;
}

// Parameters held by the first and the last pipeline stage of one TP rank (all experts), and the
// routed experts among them (before the EP split).
struct StageParams {
  double first = 0, last = 0;
  double experts = 0;  // the same on every stage
};

StageParams stage_params(const MemoryInputs& in) {
  const double tp = static_cast<double>(in.tp), pp = static_cast<double>(in.pp);
  if (!in.config) return {in.params / (tp * pp), in.params / (tp * pp), 0};
  const model::ModelConfig& c = *in.config;
  const double experts = routed_expert_params(c) / (tp * pp);
  if (in.pp == 1) {
    const double all = static_cast<double>(c.param_count()) / tp;
    return {all, all, experts};
  }
  const ParamSplit s = split_params(c);
  const double layers = static_cast<double>(c.n_layers) / pp * s.per_layer;
  const double head_copy = c.tied_embeddings ? static_cast<double>(c.vocab_size) * static_cast<double>(c.d_model) : s.head;
  return {(s.embedding + layers) / tp, (layers + head_copy) / tp + s.final_norm, experts};
}

struct StageActivations {
  double first = 0, last = 0;
};

// Activations of the first and last stage for one (recompute, flash) choice.
StageActivations stage_activations(const MemoryInputs& in, bool recompute, bool flash) {
  const model::ModelConfig& c = *in.config;
  const double e = (in.precision == Precision::kFp32 || in.precision == Precision::kTf32) ? 4.0 : 2.0;
  const double tp = static_cast<double>(in.tp);
  const double sbh = static_cast<double>(in.seq_len) * static_cast<double>(in.micro_batch) * static_cast<double>(c.d_model);
  const double layer = layer_activation_bytes(c, in.seq_len, in.micro_batch, flash, in.dropout, e) / tp;
  const double layer_input = e * sbh / tp;
  const double layers_per_stage = static_cast<double>(c.n_layers / std::max<int64_t>(in.pp, 1));
  const double logits = 4.0 * static_cast<double>(in.seq_len) * static_cast<double>(in.micro_batch) *
                            static_cast<double>(c.vocab_size) / tp +
                        e * sbh / tp;  // fp32 logits (their grad overwrites them) + final-norm input
  auto stash = [&](double in_flight) {
    return recompute ? in_flight * layers_per_stage * layer_input + layer : in_flight * layers_per_stage * layer;
  };
  StageActivations a;
  if (in.pp == 1) {
    a.first = a.last = stash(1) + logits;
    return a;
  }
  const double in_flight_first = static_cast<double>(std::min(in.pp, std::max<int64_t>(in.micro_batches_per_step, 1)));
  a.first = stash(in_flight_first);
  a.last = stash(1) + logits;
  return a;
}

}  // namespace

StateBytes state_bytes_per_param(Precision p) {
  if (p == Precision::kFp32 || p == Precision::kTf32) return {4, 4, 0, 4, 4};
  return {2, 2, 4, 4, 4};  // bf16 (and fp8, V100 fp16): mixed-precision Adam
}

double routed_expert_params(const model::ModelConfig& c) {
  if (!c.moe.enabled()) return 0;
  return static_cast<double>(c.moe_layer_count()) * static_cast<double>(c.moe.num_experts) *
         static_cast<double>(c.ffn_param_count(c.moe.expert_ffn));
}

double layer_activation_bytes(const model::ModelConfig& c, int64_t seq_len, int64_t micro_batch, bool flash,
                              bool dropout, double e) {
  const double s = static_cast<double>(seq_len), b = static_cast<double>(micro_batch);
  const double h = static_cast<double>(c.d_model), q = static_cast<double>(c.q_dim());
  const double kv = static_cast<double>(c.kv_dim()), H = static_cast<double>(c.ffn_hidden);
  const double a = static_cast<double>(c.n_heads);
  const double sb = s * b;
  double bytes = 0;
  bytes += 2 * e * sb * h;                 // the two norm inputs
  bytes += e * sb * h;                     // QKV matmul input
  bytes += e * sb * (q + kv);              // Q and K (for QKᵀ)
  bytes += e * sb * kv;                    // V
  bytes += e * sb * q;                     // attention output = out-projection input
  bytes += e * sb * h;                     // FFN input
  const double hidden_tensors = c.ffn == model::FfnKind::kGlu ? 3 : 2;
  const double dense_ffn = hidden_tensors * e * sb * H;  // FFN hidden tensors
  if (c.moe.enabled()) {
    const double k = static_cast<double>(c.moe.top_k), F = static_cast<double>(c.moe.expert_ffn);
    const double moe_ffn = (k + static_cast<double>(c.moe.shared_experts)) * hidden_tensors * e * sb * F  // experts' hidden
                           + k * e * sb * h                                                             // permuted inputs
                           + 4 * sb * static_cast<double>(c.moe.num_experts);                          // router probs
    const double L = static_cast<double>(c.n_layers), moe_layers = static_cast<double>(c.moe_layer_count());
    bytes += (moe_layers * moe_ffn + (L - moe_layers) * dense_ffn) / L;
  } else {
    bytes += dense_ffn;
  }
  if (dropout) bytes += 2 * sb * h;        // attention-output and FFN-output dropout masks (1 B)
  if (flash) {
    bytes += 4 * a * sb;                   // fp32 log-sum-exp per query row
  } else {
    bytes += e * a * s * sb;               // softmax probabilities
    if (dropout) bytes += a * s * sb + e * a * s * sb;  // their dropout mask and output
  }
  return bytes;
}

MemoryBreakdown estimate_memory(const MemoryInputs& in) {
  const StateBytes sb = state_bytes_per_param(in.precision);
  const double dp = static_cast<double>(std::max<int64_t>(in.dp, 1));
  const double w_div = in.zero_stage >= 3 ? dp : 1, g_div = in.zero_stage >= 2 ? dp : 1,
               o_div = in.zero_stage >= 1 ? dp : 1;
  const StageParams params = stage_params(in);
  // Routed experts: split over ep, replicated (and ZeRO-sharded) over dp/ep.
  const double ep = static_cast<double>(std::max<int64_t>(in.ep, 1));
  const double edp = std::max(dp / ep, 1.0);
  const double ew_div = in.zero_stage >= 3 ? edp : 1, eg_div = in.zero_stage >= 2 ? edp : 1,
               eo_div = in.zero_stage >= 1 ? edp : 1;

  // ZeRO-3 units besides the layers: the ends (embeddings, final norm, LM head) of this stage. Over
  // several ranks lmtrain streams the vocabulary tensors in chunks of at most a layer's size
  // (docs/DIST.md): only the position embedding and the final norm remain.
  const bool streamed = in.zero_stage >= 3 && in.dp > 1;
  double ends_first = 0, ends_last = 0;
  if (in.config && streamed) {
    const ParamSplit sp = split_params(*in.config);
    const double pos = sp.embedding - static_cast<double>(in.config->vocab_size) * static_cast<double>(in.config->d_model);
    ends_first = ends_last = pos + sp.final_norm;
  } else if (in.config) {
    const ParamSplit sp = split_params(*in.config);
    const double tp_d = static_cast<double>(in.tp);
    const double head_copy = in.config->tied_embeddings ? sp.embedding : sp.head;
    if (in.pp <= 1) {
      ends_first = ends_last = (sp.embedding + sp.head) / tp_d + sp.final_norm;
    } else {
      ends_first = sp.embedding / tp_d;
      ends_last = head_copy / tp_d + sp.final_norm;
    }
  }
  auto states_for = [&](double all, double ends, MemoryBreakdown& m) {
    const double n = all - params.experts, x = params.experts / ep;  // replicated over DP | expert shard
    m.stage_params = n + x;
    m.expert_params = x;
    m.weights = sb.weights * (n / w_div + x / ew_div);
    m.grads = sb.grads * (n / g_div + x / eg_div);
    m.master = sb.master * (n / o_div + x / eo_div);
    m.adam_m = sb.adam_m * (n / o_div + x / eo_div);
    m.adam_v = sb.adam_v * (n / o_div + x / eo_div);
    m.zero3_gather = 0;
    if (in.zero_stage >= 3) {
      // A layer's weights with its routed experts split over ep.
      const double per_layer = in.config ? (split_params(*in.config).per_layer -
                                            routed_expert_params(*in.config) / static_cast<double>(in.config->n_layers) *
                                                (1 - 1 / ep)) /
                                               static_cast<double>(in.tp)
                                         : m.stage_params / 32.0;  // no shape: assume ~32 layers
      // Two layers in flight (one computing, the next prefetched), and the ends as a unit of their
      // own: gathered for the pass, with their full gradient held until it is reduce-scattered
      // (the embedding's is written at both ends of the pass when tied). Streamed (several ranks):
      // the LM head's chunks pass through the layers' buffers, whose gradient slot then counts too.
      m.zero3_gather = sb.weights * (2 * per_layer + ends) + sb.grads * ends + (streamed ? sb.grads * per_layer : 0);
    }
  };
  auto finish = [&](MemoryBreakdown& m, double activations) {
    m.activations = activations;
    m.runtime_overhead = in.runtime_overhead_bytes;
    m.fragmentation = in.fragmentation * (m.model_states() + m.zero3_gather + activations);
    m.total = m.model_states() + m.zero3_gather + activations + m.runtime_overhead + m.fragmentation;
  };

  MemoryBreakdown first, last;
  states_for(params.first, ends_first, first);
  states_for(params.last, ends_last, last);
  first.stage = 0;
  last.stage = std::max<int64_t>(in.pp, 1) - 1;
  if (!in.config) {
    finish(first, 0);
    return first;  // first and last hold the same N/(tp·pp)
  }
  first.activations_known = last.activations_known = true;
  const StageActivations plain = stage_activations(in, false, false), flash = stage_activations(in, false, true),
                         rc = stage_activations(in, true, false), rc_flash = stage_activations(in, true, true);
  first.activation_variants = {plain.first, flash.first, rc.first, rc_flash.first};
  last.activation_variants = {plain.last, flash.last, rc.last, rc_flash.last};
  auto chosen = [&](const ActivationVariants& v) {
    return in.recompute ? (in.flash_attention ? v.recompute_flash : v.recompute)
                        : (in.flash_attention ? v.flash : v.plain);
  };
  finish(first, chosen(first.activation_variants));
  finish(last, chosen(last.activation_variants));
  return last.total > first.total ? last : first;
}

int64_t zero3_head_chunks(const model::ModelConfig& c) {
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(split_params(c).per_layer) / std::max<int64_t>(c.d_model, 1));
  return (c.vocab_size + rows - 1) / rows;
}

}  // namespace lmt::plan
