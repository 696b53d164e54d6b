// Decoder: incremental (KV-cached) inference of a Transformer, one batch row.
//
// The decoder owns a KV cache (per layer, K and V of [1, max_len, G, HD] f32, allocated once in the
// constructor) and runs new tokens through the model's own sub-blocks: per layer
// AttentionBlock::decode (writes the new k, v into the cache and attends over it) and
// FfnBlock::decode, with the model's parameter views and backend — the very code the training
// forward runs (model/attention_block.h, model/ffn_block.h), so a block variant is written once.
// The decoder itself keeps only the cache, the chunking, the embeddings and the logits.
//
// Prefill: forward() takes any number of tokens and processes them in chunks of up to
// `prefill_chunk` rows through the same code path as single-token decoding: projections and FFN are
// GEMMs over the chunk, attention is one attention_decode per token (token i of the chunk sees
// cache positions [0, pos+i]). One code path for prompt and continuation is what the
// cache-vs-full-sequence test checks; Transformer::forward is not reused because its K/V live in a
// training activation arena sized for a fixed T and would have to be copied into the cache.
//
// Compute is f32 from the f32 master weights (the model must have an f32 master; no prepare()
// needed). Logits are f32 over the real vocabulary V (padding rows excluded).
//
// Ownership: the decoder references the model (which must outlive it) and never modifies it.
// Threading: one thread at a time (the backend parallelises internally).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lmt/model/attention_block.h"
#include "lmt/model/ffn_block.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::eval {

class Decoder {
 public:
  // max_len: cache capacity in tokens, in [1, config.max_seq_len].
  Decoder(model::Transformer& model, int64_t max_len, int64_t prefill_chunk = 64);

  int64_t length() const { return length_; }    // tokens in the cache
  int64_t max_len() const { return max_len_; }
  int64_t vocab_size() const { return V_; }
  const model::ModelConfig& config() const { return model_.config(); }

  // Forgets every cached token (the next forward() starts at position 0).
  void reset() { length_ = 0; }

  // Appends `tokens` (ids in [0, V), at least one; length() + size <= max_len()) at positions
  // [length(), length() + size) and returns the logits [V] after the last of them (valid until the
  // next call). If `all_logits` ([size, V] f32) is given, the logits after every token are written
  // there too.
  std::span<const float> forward(std::span<const int32_t> tokens, float* all_logits = nullptr);

  // Several independent continuations of the cached tokens in one chunk (shared-prefix scoring):
  // `tokens` = the segments concatenated, segment s of sizes[s] >= 1 tokens at positions
  // [length(), length() + sizes[s]), each attending over the cache and its own earlier tokens only.
  // The logits after tokens [from[s], sizes[s]) of each segment (from[s] <= sizes[s]) are written
  // to `logits`, segment after segment ([Σ (sizes[s] - from[s]), V] f32), through one LM-head GEMM.
  // Needs Σ sizes <= the prefill chunk and length() + Σ sizes <= max_len(). length() is unchanged:
  // the segments are not kept.
  void forward_segments(std::span<const int32_t> tokens, std::span<const int64_t> sizes, std::span<const int64_t> from,
                        float* logits);
  int64_t chunk() const { return chunk_; }

 private:
  // Embeddings and every block over rows [0, n) of `tokens` at the positions already in positions_
  // (segment_ends: see AttentionBlock::decode); leaves the trunk output in x_.
  void run_trunk(const int32_t* tokens, int64_t n, std::span<const int64_t> segment_ends);
  // Runs rows [0, n) of the scratch through the trunk at positions [length_, length_ + n).
  void forward_chunk(const int32_t* tokens, int64_t n, float* all_logits);
  // Rows [0, n) of the chunk scratch as the sub-blocks' decode activations.
  model::AttentionActs attention_rows(int64_t n) const;
  model::FfnActs ffn_rows(int64_t n) const;

  model::Transformer& model_;
  kernels::Backend& be_;
  model::ModelViews w_;
  int64_t max_len_, chunk_, V_;
  int64_t length_ = 0;
  Tensor k_cache_, v_cache_;  // [L, max_len, G, HD]
  // Scratch of `chunk_` rows: residual x [C], norm out h [C], q [NH·HD], q_pre/k_pre (QK-norm),
  // att [NH·HD], proj [C], u [U], a [H], statistics [chunk], positions and ids [chunk] i32.
  Tensor x_, h_, q_, q_pre_, k_pre_, att_, proj_, u_, a_, mean_, rstd_, qk_rstd_, positions_, ids_;
  Tensor logits_;  // [V] the last token's logits
  std::unique_ptr<Arena> moe_arena_;  // MoE layers' chunk scratch (model::MoeBlock::plan, f32)
  model::MoeActs moe_acts_;
};

}  // namespace lmt::eval
