// Tiny model variants and helpers shared by the model tests.
#pragma once

#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/model/config.h"

namespace lmt::model::testing {

struct Variant {
  std::string name;
  ModelConfig config;
  bool doc_masking = false;
  float z_loss = 0.0f;
};

// The `tiny` preset shrunk to a few thousand parameters (GQA, 2 blocks, vocabulary 37).
inline ModelConfig tiny_test_config() {
  ModelConfig c = *preset("tiny");
  c.vocab_size = 37;  // padded to 64: exercises vocabulary padding
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.ffn_hidden = 24;
  return c;
}

// A few-thousand-parameter config of each architecture family the issue names.
inline std::vector<Variant> tiny_variants() {
  auto base = [](const char* name) {
    ModelConfig c = tiny_test_config();
    c.name = name;
    c.init_std = 0.2f;
    return c;
  };
  std::vector<Variant> v;
  {
    ModelConfig c = base("gpt2_style");
    c.family = NamingFamily::kGpt2;
    c.positions = PositionKind::kLearned;
    c.norm = NormKind::kLayerNorm;
    c.ffn = FfnKind::kMlp;
    c.activation = kernels::Activation::kGeluTanh;
    c.n_kv_heads = c.n_heads;
    c.attn_bias = c.attn_out_bias = c.mlp_bias = true;
    v.push_back({"gpt2_style", c});
  }
  v.push_back({"llama_gqa", base("llama_gqa")});
  {
    ModelConfig c = base("qwen3_qknorm_untied");
    c.qk_norm = true;
    c.tied_embeddings = false;
    c.head_dim = 8;  // NH·HD != C
    v.push_back({"qwen3_qknorm_untied", c});
  }
  {
    ModelConfig c = base("olmoe_qknorm_full");  // OLMoE's QK-norm over whole q [32] and k [16] rows
    c.qk_norm = c.qk_norm_full = true;
    c.tied_embeddings = false;
    c.head_dim = 8;
    v.push_back({"olmoe_qknorm_full", c});
  }
  {
    ModelConfig c = base("partial_rope_nope");
    c.rotary_fraction = 0.5f;
    c.nope_every = 2;
    c.n_kv_heads = 1;  // MQA
    c.norm = NormKind::kLayerNormNoBias;
    v.push_back({"partial_rope_nope", c});
  }
  {
    ModelConfig c = base("nope_relu_mlp_docs");
    c.positions = PositionKind::kNone;
    c.ffn = FfnKind::kMlp;
    c.activation = kernels::Activation::kRelu;
    c.mlp_bias = true;
    v.push_back({"nope_relu_mlp_docs", c, /*doc_masking=*/true});
  }
  v.push_back({"llama_docs_zloss", base("llama_docs_zloss"), true, 1e-2f});
  // RoPE scaling (model/rope.h) with positions past the original context (T > 4): Llama 3's
  // per-frequency rescaling, and YaRN's ramp with its attention scaling of cos/sin. (Dynamic NTK is
  // left out here: its decode uses per-call frequencies, by design unlike the training forward;
  // tests/model/rope_scaling_test.cpp checks it against transformers.)
  {
    ModelConfig c = base("llama3_rope_scaling");
    c.rope_theta = 100.0f;
    c.rope_scaling.type = RopeScalingType::kLlama3;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 4;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    v.push_back({"llama3_rope_scaling", c});
  }
  {
    ModelConfig c = base("yarn_rope_scaling");
    c.head_dim = 8;  // NH·HD != C; 4 frequencies for the ramp
    c.rope_scaling.type = RopeScalingType::kYarn;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 4;
    v.push_back({"yarn_rope_scaling", c, /*doc_masking=*/true});
  }
  return v;
}

struct Batch {
  std::vector<int32_t> tokens, targets, doc_ids;
};

// Random tokens; targets are the next token with a few ignored; documents of random lengths.
inline Batch random_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (int64_t r = 0; r < B; ++r) {
    int32_t doc = 0;
    int64_t left = 0;
    for (int64_t t = 0; t < T; ++t) {
      b.tokens.push_back(static_cast<int32_t>(rng.below(V)));
      b.targets.push_back(rng.uniform() < 0.1 ? -100 : static_cast<int32_t>(rng.below(V)));
      if (left == 0) {
        ++doc;
        left = 1 + static_cast<int64_t>(rng.below(T / 2));
      }
      b.doc_ids.push_back(doc);
      --left;
    }
  }
  return b;
}

}  // namespace lmt::model::testing
