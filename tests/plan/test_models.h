// Model shapes from the literature that are not lmtrain presets, for the planner's worked examples.
#pragma once

#include "lmt/model/config.h"

namespace lmt::plan::testing {

// Llama 3 8B (Meta 2024): 32 layers, d 4096, 32 heads, 8 KV heads, SwiGLU 14336, 128256 vocabulary,
// untied embeddings; 8,030,261,248 parameters.
inline model::ModelConfig llama3_8b() {
  model::ModelConfig c;
  c.name = "llama3-8b";
  c.vocab_size = 128256;
  c.max_seq_len = 8192;
  c.n_layers = 32;
  c.d_model = 4096;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.ffn_hidden = 14336;
  c.rope_theta = 500000.f;
  c.tied_embeddings = false;
  return c;
}

// A GPT block as Korthikanti et al. 2022 count it: MHA, 4h two-matrix MLP, learned positions.
inline model::ModelConfig gpt_block(int64_t layers, int64_t d, int64_t heads, int64_t vocab = 51200) {
  model::ModelConfig c;
  c.name = "gpt";
  c.family = model::NamingFamily::kGpt2;
  c.vocab_size = vocab;
  c.max_seq_len = 2048;
  c.n_layers = layers;
  c.d_model = d;
  c.n_heads = c.n_kv_heads = heads;
  c.head_dim = d / heads;
  c.ffn_hidden = 4 * d;
  c.norm = model::NormKind::kLayerNorm;
  c.ffn = model::FfnKind::kMlp;
  c.positions = model::PositionKind::kLearned;
  c.attn_bias = c.attn_out_bias = c.mlp_bias = true;
  return c;
}

}  // namespace lmt::plan::testing
