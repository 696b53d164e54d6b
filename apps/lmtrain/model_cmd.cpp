// `lmtrain model info --preset NAME|FILE [--seq-len N] [--json]`: a preset's (or a model config file's:
// lmtrain JSON or a Hugging Face config.json, as `lmtrain plan --preset`) configuration, exact total
// and active parameter counts (equal for dense models; MoE: docs/MOE.md), the parameters (and fp32
// bytes) of each component, the FLOPs per token (active) and, in --json, the Hugging Face
// config.json the model exports as ("hf_config"; null with "hf_config_error" when none computes it).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/model/config.h"
#include "lmt/model/flops.h"
#include "lmt/model/hf_checkpoint.h"
#include "lmt/model/params.h"
#include "lmt/plan/model_source.h"

namespace lmt::cli {
namespace {

struct ModelInfoArgs {
  std::string preset;
  int64_t seq = 0;
  bool json = false;
};

// Which component a parameter belongs to, for the breakdown.
std::string component(const model::ParamInfo& p) {
  switch (p.role) {
    case model::ParamRole::kEmbedding: return "embedding";
    case model::ParamRole::kPosition: return "position_embedding";
    case model::ParamRole::kLmHead: return "lm_head";
    default: break;
  }
  if (p.layer < 0) return "final_norm";
  const bool attn = p.name.find("attn") != std::string::npos;
  if (p.role == model::ParamRole::kNorm || p.role == model::ParamRole::kBias) {
    if (p.name.find("norm") != std::string::npos || p.name.find("ln_") != std::string::npos) return "norms";
  }
  return attn ? "attention" : "ffn";
}

// A float as the shortest decimal that reads back to it (JSON would print the double's digits).
double f7(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(v));
  return std::strtod(buf, nullptr);
}

Status run_model_info(const ModelInfoArgs& a) {
  LMT_ASSIGN_OR_RETURN(model::ModelConfig c, plan::load_model(a.preset));
  LMT_RETURN_IF_ERROR(check_flag("--seq-len", a.seq, 0, model::ModelLimits::kMaxSeqLen, "0: the model's max_seq_len"));
  model::ParamLayout layout(c);
  std::map<std::string, int64_t> counts;
  for (const auto& p : layout.params()) counts[component(p)] += p.hf_shape.numel();
  const int64_t seq = a.seq > 0 ? a.seq : c.max_seq_len;
  const model::FlopsPerToken f = model::flops_per_token(c, seq);
  nlohmann::json comps = nlohmann::json::object();
  for (const auto& [k, n] : counts) comps[k] = {{"params", n}, {"bytes_fp32", 4 * n}};
  nlohmann::json cfg = {
      {"family", model::family_name(c.family)}, {"vocab_size", c.vocab_size}, {"padded_vocab", c.padded_vocab()},
      {"max_seq_len", c.max_seq_len}, {"n_layers", c.n_layers}, {"d_model", c.d_model}, {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"ffn_hidden", c.ffn_hidden},
      {"ffn", model::ffn_name(c.ffn)}, {"activation", kernels::activation_name(c.activation)},
      {"norm", model::norm_name(c.norm)}, {"norm_eps", f7(c.norm_eps)}, {"positions", model::position_name(c.positions)},
      {"rope_theta", f7(c.rope_theta)}, {"rotary_fraction", f7(c.rotary_fraction)},
      {"rope_scaling", model::rope_scaling_to_hf(c)},  // HF's rope_parameters form; null: none
      {"nope_every", c.nope_every},
      {"qk_norm", c.qk_norm}, {"attn_bias", c.attn_bias}, {"attn_out_bias", c.attn_out_bias},
      {"mlp_bias", c.mlp_bias}, {"tied_embeddings", c.tied_embeddings}, {"init_std", f7(c.init_std)}};
  if (c.qk_norm_full) cfg["qk_norm_full"] = true;
  if (c.moe.enabled()) {
    cfg["moe"] = {{"num_experts", c.moe.num_experts}, {"top_k", c.moe.top_k}, {"expert_ffn", c.moe.expert_ffn},
                  {"shared_experts", c.moe.shared_experts}, {"every", c.moe.every}, {"moe_layers", c.moe_layer_count()},
                  {"renormalize", c.moe.renormalize}};
  }
  const int64_t total = c.param_count(), active = c.active_param_count();
  if (a.json) {
    nlohmann::json j = {{"preset", a.preset}, {"params", total}, {"active_params", active}, {"bytes_fp32", 4 * total},
                        {"config", cfg}, {"components", comps}, {"seq_len", seq},
                        {"flops_per_token_6n", f.six_n}, {"flops_per_token_training", f.training}};
    auto hf = model::config_to_hf(c);
    j["hf_config"] = hf.ok() ? *hf : nlohmann::json(nullptr);
    if (!hf.ok()) j["hf_config_error"] = hf.status().message();
    std::printf("%s\n", j.dump().c_str());
    return Status::Ok();
  }
  std::printf("model %s: %lld parameters (%.2f M), %.1f MiB in fp32\n", a.preset.c_str(), static_cast<long long>(total),
              total / 1e6, 4.0 * total / 1048576.0);
  if (c.moe.enabled())
    std::printf("active: %lld parameters per token (%.2f M, %.1f%%): top %lld of %lld experts in %lld MoE layers\n",
                static_cast<long long>(active), active / 1e6, 100.0 * active / total, static_cast<long long>(c.moe.top_k),
                static_cast<long long>(c.moe.num_experts), static_cast<long long>(c.moe_layer_count()));
  for (auto it = cfg.begin(); it != cfg.end(); ++it) std::printf("  %-16s %s\n", it.key().c_str(), it.value().dump().c_str());
  std::printf("components:\n");
  for (const auto& [k, n] : counts)
    std::printf("  %-20s %14lld params  %10.1f MiB fp32  %5.1f%%\n", k.c_str(), static_cast<long long>(n),
                4.0 * n / 1048576.0, 100.0 * n / total);
  std::printf("FLOPs per token at seq %lld%s: 6N %.3e, training (detailed) %.3e\n", static_cast<long long>(seq),
              c.moe.enabled() ? " (active parameters)" : "", f.six_n, f.training);
  return Status::Ok();
}

}  // namespace

void add_model_command(CLI::App& app, Runner& runner) {
  CLI::App* model = app.add_subcommand("model", "inspect model presets and configs");
  model->require_subcommand(1);
  static ModelInfoArgs args;
  CLI::App* info = model->add_subcommand("info", "configuration, parameter count and bytes per component");
  info->add_option("--preset", args.preset, "preset name, or a model config file (lmtrain JSON or a Hugging Face config.json)")->required();
  info->add_option("--seq-len", args.seq, "sequence length for the FLOP count (default: max_seq_len)");
  add_deprecated_option(info, "--seq", "--seq-len", args.seq);
  info->add_flag("--json", args.json, "print one compact JSON object");
  info->callback([&runner] { runner.set(run_model_info(args)); });
}

}  // namespace lmt::cli
