// Decoder: incremental (KV-cached) inference of a Transformer over `rows` sequences (batch rows).
//
// The decoder owns a KV cache (per layer and row, K and V of [S = max_len, G, HD] f32, allocated
// once in the constructor) and runs new tokens through the model's own sub-blocks: per layer
// AttentionBlock::decode / decode_rows (writes the new k, v into the cache and attends over it) and
// FfnBlock::decode, with the model's backend — the very code the training forward runs
// (model/attention_block.h, model/ffn_block.h), so a block variant is written once. The decoder
// itself keeps only the cache, the chunking, the embeddings and the logits.
//
// Prefill: forward() takes any number of tokens of one row and processes them in chunks of up to
// `prefill_chunk` rows through the same code path as single-token decoding: projections and FFN are
// GEMMs over the chunk, attention is one attention_prefill call per layer (token i of the chunk sees
// cache positions [0, pos+i]). One code path for prompt and continuation is what the
// cache-vs-full-sequence test checks; Transformer::forward is not reused because its K/V live in a
// training activation arena sized for a fixed T and would have to be copied into the cache.
//
// Batched decoding: step() appends one token to each of the rows (each at its own length) in one
// pass: the projections, FFN and LM head are GEMMs with M = rows, attention is one attention_decode
// per row. Row r of step() computes exactly what forward() of that one token on row r computes up to
// the GEMMs' summation order at another M (tests/eval/decode_test.cpp states the tolerance).
//
// Weights (eval/decode_weights.h): kF32 computes everything in f32 from the f32 master (exact);
// kBF16 reads the GEMM weights from a bf16 copy (or the model's bf16 mirror), activations and
// accumulation stay f32. Logits are f32 over the real vocabulary V (padding rows excluded).
//
// Memory: the caches and scratch live in the backend's memory (a GPU's for cuda); token ids and
// positions are computed on the host and copied in, and the logits handed to the caller are host
// memory (on a device backend they are computed in device scratch and copied out).
//
// Ownership: the decoder references the model (which must outlive it) and never modifies it.
// Threading: one thread at a time (the backend parallelises internally).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lmt/eval/decode_weights.h"
#include "lmt/model/attention_block.h"
#include "lmt/model/ffn_block.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::eval {

class Decoder {
 public:
  // max_len: cache capacity in tokens per row, in [1, config.max_seq_len]. weights: kF32 or kBF16.
  // n_rows >= 1: sequences decoded side by side (step()). The chunk (rows of scratch, the most
  // tokens one pass takes) is prefill_chunk capped at max_len · n_rows, and at least n_rows.
  Decoder(model::Transformer& model, int64_t max_len, int64_t prefill_chunk = 64, DType weights = DType::kF32,
          int64_t n_rows = 1);

  int64_t length(int64_t row = 0) const { return lengths_[row]; }  // tokens in the row's cache
  int64_t max_len() const { return max_len_; }
  int64_t rows() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t vocab_size() const { return V_; }
  const model::ModelConfig& config() const { return model_.config(); }
  const DecodeWeights& weights() const { return weights_; }

  // Forgets every cached token of every row (the next forward() starts at position 0).
  void reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

  // Appends `tokens` (ids in [0, V), at least one; length(row) + size <= max_len()) to row `row` at
  // positions [length(row), length(row) + size) and returns the logits [V] after the last of them
  // (valid until the next call). If `all_logits` ([size, V] f32) is given, the logits after every
  // token are written there too.
  std::span<const float> forward(std::span<const int32_t> tokens, float* all_logits = nullptr, int64_t row = 0);

  // One new token per row: tokens[r] (in [0, V)) is appended to row r at position length(r) (each
  // row below max_len()); logits [rows, V] f32 receive the logits after each row's token.
  // tokens[r] == -1: row r sits this step out (nothing appended; its logits row is unspecified).
  void step(std::span<const int32_t> tokens, float* logits);

  // Several independent continuations of the cached tokens in one chunk (shared-prefix scoring):
  // `tokens` = the segments concatenated, segment s of sizes[s] >= 1 tokens at positions
  // [length(), length() + sizes[s]), each attending over the cache and its own earlier tokens only.
  // The logits after tokens [from[s], sizes[s]) of each segment (from[s] <= sizes[s]) are written
  // to `logits`, segment after segment ([Σ (sizes[s] - from[s]), V] f32), through one LM-head GEMM.
  // Needs Σ sizes <= the prefill chunk and length() + Σ sizes <= max_len(). length() is unchanged:
  // the segments are not kept. Row 0 only.
  void forward_segments(std::span<const int32_t> tokens, std::span<const int64_t> sizes, std::span<const int64_t> from,
                        float* logits);

  // The general form, over several rows in one pass (batched shared-prefix scoring): segment s has
  // `size` tokens (consecutive in `tokens`, Σ size <= chunk()) continuing row `row` at positions
  // [start, start + size), start <= length(row): it sees that row's cache rows [0, start) and its
  // own earlier tokens, and its k, v are written to cache rows [start, start + size) of its row
  // (over an earlier segment's at the same positions). The logits after its tokens [from, size) go
  // to `logits`, segment after segment ([Σ (size - from), V] f32), through one LM-head GEMM.
  // advance: each segment's row then has length start + size (a prefill); else lengths are kept.
  struct Segment {
    int64_t row = 0, start = 0, size = 0, from = 0;
  };
  void forward_segments(std::span<const int32_t> tokens, std::span<const Segment> segments, float* logits, bool advance);
  int64_t chunk() const { return chunk_; }

 private:
  // Embeddings and every block over rows [0, n) of `tokens` at the positions already in positions_,
  // on cache row `row`; leaves the trunk output in x_.
  void run_trunk(const int32_t* tokens, int64_t n, int64_t row);
  // Layer l's FFN over rows [0, x.dim(0)): MoeBlock on MoE layers (from the f32 master, with the
  // layer's router bias), else FfnBlock (GEMM weights from `g`: bf16 when the decoder was built so).
  void ffn_decode(int64_t l, const TensorView& x, const model::BlockViews& w, const model::BlockViews& g,
                  const model::FfnActs& ffn_acts, const TensorView& proj);
  // The same with the segments of forward_segments (any rows; positions_ already set).
  void run_trunk(const int32_t* tokens, int64_t n, std::span<const model::DecodeSegment> segments);
  // Runs rows [0, n) of the scratch through the trunk at positions [length(row), length(row) + n).
  void forward_chunk(const int32_t* tokens, int64_t n, float* all_logits, int64_t row);
  // Token and position embeddings of rows [0, n) into x_ (ids copied into ids_, and positions
  // [0, n) of host_positions_ into positions_).
  void embed(const int32_t* tokens, int64_t n);
  // `rows` × V logits for the caller's host buffer `host`: the buffer itself on a host backend, else
  // device scratch that deliver() then copies into it.
  TensorView logits_out(float* host, int64_t rows);
  void deliver(float* host, const TensorView& out);
  // Layer l's K or V cache: all rows [rows, S, G, HD], or one row [1, S, G, HD].
  TensorView cache(const Tensor& t, int64_t layer) const;
  TensorView cache(const Tensor& t, int64_t layer, int64_t row) const;
  // Rows [0, n) of the chunk scratch as the sub-blocks' decode activations.
  model::AttentionActs attention_rows(int64_t n) const;
  model::FfnActs ffn_rows(int64_t n) const;

  model::Transformer& model_;
  kernels::Backend& be_;
  DecodeWeights weights_;
  int64_t max_len_, chunk_, V_;
  std::vector<int64_t> lengths_;
  Tensor k_cache_, v_cache_;  // [L, rows, max_len, G, HD]
  // Scratch of `chunk_` rows: residual x [C], norm out h [C], q [NH·HD], q_pre/k_pre (QK-norm),
  // k_new/v_new [G·HD] (step(), segments), att [NH·HD], proj [C], u [U], a [H], statistics [chunk],
  // positions and ids [chunk] i32.
  Tensor x_, h_, q_, q_pre_, k_pre_, k_new_, v_new_, att_, proj_, u_, a_, mean_, rstd_, qk_rstd_, positions_, ids_;
  std::vector<int32_t> host_positions_;  // [chunk] the positions of the next pass, written on the host
  Tensor logits_;                        // [1, V] the last token's logits (host memory)
  Tensor dev_logits_;                    // [chunk, V] logits computed on a device backend (absent on host)
  std::unique_ptr<Arena> moe_arena_;  // MoE layers' chunk scratch (model::MoeBlock::plan, f32)
  model::MoeActs moe_acts_;
};

}  // namespace lmt::eval
