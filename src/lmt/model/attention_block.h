// The attention sub-block of a pre-norm transformer block:
//   res_out = res_in + o_proj(attention(rope(qk_norm(q), qk_norm(k)), v)),  q, k, v = proj(norm(res_in))
// norm: config.norm; QK-norm: RMSNorm of every head over HD (qk_norm configs only), or with
// qk_norm_full of the whole q row [NH·HD] and k row [G·HD] (OLMoE: q_norm/k_norm on the projection
// outputs before they are split into heads); RoPE on the first
// rotary_dim dims of every head at the rows' positions, with the config's RoPE scaling (model/rope.h;
// rope configs, skipped in NoPE layers);
// causal attention with grouped-query heads (query head h reads kv head h/(NH/G)), scale 1/sqrt(HD).
//
// Letters: N rows (B·T when training; the n new tokens when decoding), C d_model, NH query heads,
// G kv heads, HD head dim, S KV cache capacity.
//
// Three passes over one code path (the norm, projections, QK-norm, RoPE and the output projection
// are shared; only the attention kernel differs):
//   forward   training, N = B·T rows: attention_forward over each row of T tokens (doc masking
//             optional); saves AttentionActs for backward.
//   backward  training: from d res_out in Scratch::dres, leaves d res_in there.
//   decode    inference, n new rows at positions [length, length + n) of one sequence: k and v are
//             written straight into rows [length, length + n) of the layer's KV cache and token i
//             attends over cache rows [0, length + i] (one attention_prefill call for the n rows,
//             or one per segment). The decoder's logits
//             therefore equal the training forward's up to the attention kernels' rounding.
//
// bf16 convention (forward/backward with BlockPass::compute == kBF16): every GEMM reads bf16 — its
// weight from the bf16 mirror (AttentionWeights' GEMM views), its activation converted once (h and
// att_c are saved in bf16; a gradient is converted into Scratch::grad_c just before its GEMM) — and
// writes f32. The norms, QK-norm, RoPE and the residual stay f32 (f64 in an f64 run) and read norm
// weights and biases from the master. Attention keeps f32 tensors but is told the compute dtype, so
// a backend may round its products' operands to bf16 (kernels/backend.h: cpu with AVX512-BF16, cuda).
// decode computes in f32 from f32 views throughout.
//
// Gradient contract: parameter gradients accumulate (+=); activation gradients in Scratch are
// overwritten (=); the residual gradient Scratch::dres accumulates (the residual passes d res_out
// through unchanged and the norm adds its input gradient).
//
// Tensor parallelism (model/tensor_parallel.h): with a TensorParallel group the block is one rank's
// part (its heads); forward sums the output projection over the group before the residual add
// (rank 0 adds o's bias), backward sums d h over the group before the norm's backward. Under
// sequence parallelism res_in/res_out and the norm statistics hold this rank's N/size rows: the
// norm output is all-gathered, the output projection and d h reduce-scattered, and s.dres
// all-gathered into s.dres_full for backward.
//
// Threading: one thread at a time (the backend parallelises internally). The block holds
// references only (the backend and config outlive it); it is cheap to construct per call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/model/block.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"
#include "lmt/tensor/arena.h"

namespace lmt::model {

struct Scratch;  // model/activations.h

// The attention sub-block's parameters, as views into some flat buffer (see BlockViews).
struct AttentionWeights {
  TensorView norm_w, norm_b;      // [C], [C] (LayerNorm with bias only)            master
  TensorView q_w, k_w, v_w;       // [NH·HD, C], [G·HD, C], [G·HD, C]               GEMM
  TensorView q_b, k_b, v_b;       // [NH·HD], [G·HD], [G·HD] (attn_bias only)       master
  TensorView q_norm_w, k_norm_w;  // [HD] (qk_norm only; qk_norm_full: [NH·HD], [G·HD]) master
  TensorView o_w;                 // [C, NH·HD]                                     GEMM
  TensorView o_b;                 // [C] (attn_out_bias only)                       master

  // GEMM weights from `gemm` (the bf16 mirror in bf16 mode, else the master itself), everything
  // else from `master`. Gradients: of(grad_views, grad_views).
  static AttentionWeights of(const BlockViews& master, const BlockViews& gemm);
};

// What forward saves for backward (and what decode writes, over its n rows). Dtypes: "f32" is the
// activation dtype (f64 in an f64 run), "compute" the GEMM input dtype (bf16 in bf16 mode).
struct AttentionActs {
  TensorView norm_mean, norm_rstd;  // [N] f32 (norm_mean: LayerNorm only)
  TensorView h;                     // [N,C] compute: the norm output, the projections' input
  TensorView q_pre, k_pre;          // [N,NH·HD], [N,G·HD] f32 before QK-norm (qk_norm only)
  TensorView q_rstd, k_rstd;        // [N·NH], [N·G] f32 (qk_norm only; qk_norm_full uses their first N)
  TensorView q, k, v;               // [B,T,NH,HD], [B,T,G,HD], [B,T,G,HD] f32 after QK-norm and RoPE
                                    // (decode: q [n,NH·HD]; k, v are set to the cache rows)
  TensorView att, lse;              // [B,T,NH,HD] f32 attention output, [B,NH,T] f32 (training only)
  TensorView att_c;                 // att in the compute dtype (bf16 mode), else == att
};

// One run of new tokens in AttentionBlock::decode_segments: the next `size` rows continue cache row
// `row` at positions [start, start + size).
struct DecodeSegment {
  int64_t row = 0, start = 0, size = 0;
};

class AttentionBlock {
 public:
  // tp: this rank's tensor-parallel group (model/tensor_parallel.h; `config` is then its shard
  // config) for training passes; null: none. The decode passes run without it.
  AttentionBlock(kernels::Backend& be, const ModelConfig& config, int64_t layer, const TensorParallel* tp = nullptr)
      : be_(be), c_(config), layer_(layer), tp_(tp) {}

  // Carves the activations of a [B,T] training batch from `arena`; compute: GEMM input dtype,
  // f: activation dtype. Allocation order and names are part of the arena plan.
  // norm_rows: rows of the norm statistics (B·T, or this rank's B·T / size under sequence
  // parallelism; -1: B·T).
  static AttentionActs plan(const ModelConfig& c, int64_t B, int64_t T, DType compute, DType f, Arena& arena,
                            int64_t norm_rows = -1);

  // res_out[N,C] = res_in[N,C] + attention output (backward reads res_in again: keep it). Saves `a`.
  // A pending res_in is written by the norm; the returned res_out is pending on f32_nc (block.h)
  // unless sequence parallelism added it here. f32_nc [N,C] f32: scratch (the output projection;
  // under sequence parallelism also the gathered norm output before conversion).
  Residual forward(const TensorView& res_out, const Residual& res_in, const AttentionWeights& w,
                   const AttentionActs& a, const BlockPass& pass, const TensorView& f32_nc);

  // Given forward's res_in and `a` (unchanged since), with s.dres = d res_out: grads += into `g`
  // (views of the gradient buffer), s.dres += d res_in through the norm. Uses s.datt, s.dq, s.dk,
  // s.dv, s.dq_pre, s.dk_pre, s.dh and s.grad_c as scratch. The gradients of written_grads(g) are
  // written as pass.weight_grads says (the others always accumulate).
  void backward(const TensorView& res_in, const AttentionWeights& w, const AttentionWeights& g, const AttentionActs& a,
                const BlockPass& pass, Scratch& s);
  // The gradients that backward() writes with one GEMM each and nothing else: q, k, v and o's weights.
  static std::vector<TensorView> written_grads(const AttentionWeights& g) { return {g.q_w, g.k_w, g.v_w, g.o_w}; }

  // x[n,C] += attention output of n new tokens at positions[n] (i32, = length + i), in f32.
  // k_cache, v_cache: this layer's [1,S,G,HD] f32, rows [0, length) filled by earlier calls; rows
  // [length, length + n) are written here (length + n <= S). `a` holds rows [0, n) of chunk
  // scratch: norm_mean, norm_rstd, h, q, att (att_c == att), and q_pre, k_pre, q_rstd, k_rstd with
  // qk_norm; its k, v and lse are not used. proj [n,C] f32: scratch. Attention: one
  // attention_prefill call (token i sees cache rows [0, length + i]).
  void decode(const TensorView& x, const AttentionWeights& w, const AttentionActs& a, const TensorView& k_cache,
              const TensorView& v_cache, int64_t length, const TensorView& positions, const TensorView& proj);

  // Batched decoding: x[R,C] += attention output of one new token for each of R sequences. Row r is
  // at position lengths[r] (positions[r] == lengths[r], i32) of its own cache k_cache[r], v_cache[r]
  // ([R,S,G,HD] f32, rows [0, lengths[r]) filled, lengths[r] < S). a.k, a.v: [R, G·HD] f32 scratch
  // for the new keys and values, which are copied to cache row lengths[r]; row r then attends over
  // cache rows [0, lengths[r]] (one attention_decode per row). A row with lengths[r] == -1 sits
  // out: its cache is untouched and its output row is unspecified. Otherwise as decode(); the
  // lengths are the caller's to advance.
  void decode_rows(const TensorView& x, const AttentionWeights& w, const AttentionActs& a, const TensorView& k_cache,
                   const TensorView& v_cache, std::span<const int64_t> lengths, const TensorView& positions,
                   const TensorView& proj);

  // Segments over several cache rows in one pass (batched shared-prefix scoring): x[n,C] += the
  // attention output of n new tokens that form consecutive segments (Σ size = n), segment s
  // continuing cache row segments[s].row ([R,S,G,HD] caches) at positions [start, start + size)
  // (positions[] are the caller's: start + i). k, v are projected into a.k, a.v ([n, G·HD] f32
  // scratch); just before a segment's attention its k, v are copied to cache rows [start, start +
  // size) of its row (so segments of one row may reuse positions: each sees the cache rows [0, start)
  // and its own earlier tokens), then one attention_prefill call per segment.
  void decode_segments(const TensorView& x, const AttentionWeights& w, const AttentionActs& a, const TensorView& k_cache,
                       const TensorView& v_cache, std::span<const DecodeSegment> segments, const TensorView& positions,
                       const TensorView& proj);

 private:
  // norm (into a.h, bf16 in bf16 runs) → q, k, v projections → QK-norm → RoPE, into a.q, a.k, a.v.
  // seq_nc: [N/size, C] f32 scratch under sequence parallelism (res_in then has this rank's rows), else absent.
  void project_qkv(int64_t N, const Residual& res_in, const AttentionWeights& w, const AttentionActs& a,
                   const TensorView& positions, const TensorView& f32_nc, const TensorView& seq_nc);
  // (bf16 copy of a.att) → o_proj into f32_nc → res_out = res_in + f32_nc, returned pending.
  Residual project_out(int64_t N, const TensorView& res_out, const TensorView& res_in, const AttentionWeights& w,
                       const AttentionActs& a, bool bf16, const TensorView& f32_nc, const TensorView& seq_nc);
  float scale() const;
  // The [rows, width] shapes q and k take for the QK-norm: per head or (qk_norm_full) per row.
  struct QkNormRows {
    Shape q, k;
  };
  QkNormRows qk_norm_rows(int64_t N) const;
  // The RoPE frequencies for a call over rows at `positions` (model/rope.h: the same for forward,
  // backward and decode; dynamic scaling follows the call's largest position).
  kernels::RopeFreqs rope_freqs(const TensorView& positions) const;

  kernels::Backend& be_;
  const ModelConfig& c_;
  int64_t layer_;
  const TensorParallel* tp_;
};

}  // namespace lmt::model
