// Named presets: each is a ModelConfig and nothing else. Parameter counts are pinned by tests.
#include <functional>
#include <map>

#include "lmt/model/config.h"

namespace lmt::model {
namespace {

using kernels::Activation;

ModelConfig gpt2(const char* name, int64_t layers, int64_t d, int64_t heads) {
  ModelConfig c;
  c.name = name;
  c.family = NamingFamily::kGpt2;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  c.n_layers = layers;
  c.d_model = d;
  c.n_heads = c.n_kv_heads = heads;
  c.head_dim = d / heads;
  c.ffn_hidden = 4 * d;
  c.norm = NormKind::kLayerNorm;
  c.norm_eps = 1e-5f;
  c.ffn = FfnKind::kMlp;
  c.activation = Activation::kGeluTanh;
  c.positions = PositionKind::kLearned;
  c.attn_bias = c.attn_out_bias = c.mlp_bias = true;
  c.tied_embeddings = true;
  return c;
}

ModelConfig llama(const char* name, int64_t vocab, int64_t layers, int64_t d, int64_t heads, int64_t kv_heads,
                  int64_t head_dim, int64_t ffn, bool tied, float theta, int64_t seq) {
  ModelConfig c;
  c.name = name;
  c.family = NamingFamily::kLlama;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.n_layers = layers;
  c.d_model = d;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn_hidden = ffn;
  c.norm = NormKind::kRmsNorm;
  c.norm_eps = 1e-5f;
  c.ffn = FfnKind::kGlu;
  c.activation = Activation::kSilu;
  c.positions = PositionKind::kRope;
  c.rope_theta = theta;
  c.tied_embeddings = tied;
  return c;
}

const std::map<std::string, std::function<ModelConfig()>>& registry() {
  static const std::map<std::string, std::function<ModelConfig()>> r = {
      {"gpt2-124m", [] { return gpt2("gpt2-124m", 12, 768, 12); }},
      {"gpt2-350m", [] { return gpt2("gpt2-350m", 24, 1024, 16); }},
      // The GPT-2 1.3B shape of the academic 8×B200 report (18 layers, d 2304, 18 heads).
      {"gpt2-1.3b", [] { return gpt2("gpt2-1.3b", 18, 2304, 18); }},
      // Llama-2 style at the same shape: SwiGLU (H = 8/3·d = 6144), RoPE, 32k vocabulary, untied.
      {"llama2-1.3b", [] { return llama("llama2-1.3b", 32000, 18, 2304, 18, 18, 128, 6144, false, 10000.f, 4096); }},
      // Llama-3 style 2.2B: 30 layers, d 2048, 16 heads, 8 KV heads, 128k vocabulary, tied.
      {"llama3-2.2b", [] { return llama("llama3-2.2b", 128256, 30, 2048, 16, 8, 128, 8192, true, 500000.f, 8192); }},
      // Llama 3.2's RoPE scaling (its config.json rope_scaling): llama3, factor 32, low/high frequency
      // factors 1/4, pre-trained context 8192.
      {"llama3.2-1b", [] {
         ModelConfig c = llama("llama3.2-1b", 128256, 16, 2048, 32, 8, 64, 8192, true, 500000.f, 131072);
         c.rope_scaling.type = RopeScalingType::kLlama3;
         c.rope_scaling.factor = 32.0;
         c.rope_scaling.low_freq_factor = 1.0;
         c.rope_scaling.high_freq_factor = 4.0;
         c.rope_scaling.original_max_position_embeddings = 8192;
         return c;
       }},
      {"smollm-360m", [] { return llama("smollm-360m", 49152, 32, 960, 15, 5, 64, 2560, true, 10000.f, 2048); }},
      {"smollm2-135m", [] { return llama("smollm2-135m", 49152, 30, 576, 9, 3, 64, 1536, true, 100000.f, 8192); }},
      {"qwen3-1.8b", [] {
         ModelConfig c = llama("qwen3-1.8b", 151643, 24, 2048, 16, 8, 128, 6144, false, 1000000.f, 32768);
         c.qk_norm = true;
         c.norm_eps = 1e-6f;
         return c;
       }},
      // Llama-style block at GPT-2 small's size (SwiGLU H = 2048, RoPE, RMSNorm, tied): the
      // "Llama-style 124M" of the benchmarks, same shape as bench/torch_baseline.py's llama-124m.
      {"llama-124m", [] { return llama("llama-124m", 50257, 12, 768, 12, 12, 64, 2048, true, 10000.f, 1024); }},
      // OLMoE-1B-7B (allenai/OLMoE-1B-7B-0924 config.json): 16 layers, all MoE, 64 experts of 1024, top-8
      // without renormalisation, QK-norm over the whole q and k rows, untied 50304-token vocabulary.
      {"olmoe-1b-7b", [] {
         ModelConfig c = llama("olmoe-1b-7b", 50304, 16, 2048, 16, 16, 128, 1024, false, 10000.f, 4096);
         c.qk_norm = c.qk_norm_full = true;
         c.moe.num_experts = 64;
         c.moe.top_k = 8;
         c.moe.expert_ffn = 1024;
         c.moe.renormalize = false;  // norm_topk_prob: false
         c.moe.aux_loss_coef = 0.01f;
         c.moe.router_z_loss = 0.001f;  // router_z_loss_coef
         return c;
       }},
      // Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json): 48 layers, all MoE (decoder_sparse_step 1,
      // mlp_only_layers []), 128 experts of 768, top-8 renormalised, per-head QK-norm, GQA 32/4.
      // ffn_hidden is HF's intermediate_size (used by no layer here).
      {"qwen3-30b-a3b", [] {
         ModelConfig c = llama("qwen3-30b-a3b", 151936, 48, 2048, 32, 4, 128, 6144, false, 1000000.f, 40960);
         c.qk_norm = true;
         c.norm_eps = 1e-6f;
         c.moe.num_experts = 128;
         c.moe.top_k = 8;
         c.moe.expert_ffn = 768;
         c.moe.renormalize = true;  // norm_topk_prob: true
         c.moe.aux_loss_coef = 0.001f;  // router_aux_loss_coef
         return c;
       }},
      // `tiny` with every FFN replaced by 8 experts of 256, top-2: trains here in seconds.
      {"tiny-moe", [] {
         ModelConfig c = llama("tiny-moe", 4096, 4, 256, 8, 4, 32, 688, true, 10000.f, 256);
         c.moe.num_experts = 8;
         c.moe.top_k = 2;
         c.moe.expert_ffn = 256;
         return c;
       }},
      // For tests and the demo: small enough to train for real in minutes on 2 cores.
      {"tiny", [] {
         ModelConfig c = llama("tiny", 4096, 4, 256, 8, 4, 32, 688, true, 10000.f, 256);
         return c;
       }},
  };
  return r;
}

}  // namespace

StatusOr<ModelConfig> preset(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    return NotFound("unknown model preset '" + name + "'", "valid presets: " + names);
  }
  return it->second();
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

}  // namespace lmt::model
