// The feed-forward sub-block of a pre-norm transformer block:
//   res_out = res_in + down(act(up(norm(res_in))))
// norm: config.norm; up: one GEMM to U columns; act: a gated linear unit over the fused gate·up
// projection (FfnKind::kGlu, U = 2H: SwiGLU with kSilu, GeGLU with kGeluTanh) or a pointwise
// activation (FfnKind::kMlp, U = H); down: [C, H].
//
// Letters: N rows (B·T when training; the n new tokens when decoding), C d_model, H ffn_hidden,
// U = 2H (GLU) or H (MLP).
//
// Passes: forward (training; saves FfnActs), backward (training), and decode, which is forward in
// f32 over the n new rows: the FFN is position-wise and keeps no cache.
//
// bf16 convention (forward/backward with compute == kBF16): every GEMM reads bf16 — its weight from
// the bf16 mirror (FfnWeights' GEMM views), its activation converted once (h and a are saved in
// bf16; a gradient is converted into Scratch::grad_c just before its GEMM) — and writes f32. The
// norm, the activation and the residual stay f32 (f64 in an f64 run) and read norm weights and
// biases from the master.
//
// Gradient contract: parameter gradients accumulate (+=); activation gradients in Scratch are
// overwritten (=); the residual gradient Scratch::dres accumulates (the residual passes d res_out
// through unchanged and the norm adds its input gradient).
//
// Tensor parallelism (model/tensor_parallel.h): with a TensorParallel group the block is one rank's
// part (its hidden units); forward sums down's output over the group before the residual add (rank
// 0 adds down's bias), backward sums d h over the group before the norm's backward. Under sequence
// parallelism the norm output is all-gathered, down's output and d h reduce-scattered, and s.dres
// all-gathered into s.dres_full for backward.
//
// Threading: one thread at a time (the backend parallelises internally). The block holds
// references only (the backend and config outlive it); it is cheap to construct per call.
#pragma once

#include <cstdint>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/model/config.h"
#include "lmt/model/norm.h"
#include "lmt/model/params.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/tensor/arena.h"

namespace lmt::model {

struct Scratch;  // model/activations.h

// The FFN sub-block's parameters, as views into some flat buffer (see BlockViews).
struct FfnWeights {
  TensorView norm_w, norm_b;  // [C], [C] (LayerNorm with bias only)                master
  TensorView up_w;            // [U, C]: gate rows then up rows (GLU), or [H, C]      GEMM
  TensorView up_b;            // [U] (mlp_bias only)                                  master
  TensorView down_w;          // [C, H]                                               GEMM
  TensorView down_b;          // [C] (mlp_bias only)                                  master

  // GEMM weights from `gemm` (the bf16 mirror in bf16 mode, else the master itself), everything
  // else from `master`. Gradients: of(grad_views, grad_views).
  static FfnWeights of(const BlockViews& master, const BlockViews& gemm);
};

// What forward saves for backward. "f32" is the activation dtype (f64 in an f64 run), "compute" the
// GEMM input dtype (bf16 in bf16 mode).
struct FfnActs {
  TensorView norm_mean, norm_rstd;  // [N] f32 (norm_mean: LayerNorm only)
  TensorView h;                     // [N,C] compute: the norm output, up's input
  TensorView u;                     // [N,U] f32: up (and gate) projection
  TensorView a;                     // [N,H] compute: the activation, down's input
};

class FfnBlock {
 public:
  // tp: this rank's tensor-parallel group (model/tensor_parallel.h; `config` is then its shard
  // config) for training passes; null: none.
  FfnBlock(kernels::Backend& be, const ModelConfig& config, const TensorParallel* tp = nullptr)
      : be_(be), c_(config), tp_(tp) {}

  // Carves the activations of N training rows from `arena`; compute: GEMM input dtype, f: the
  // activation dtype. Allocation order and names are part of the arena plan.
  // norm_rows: rows of the norm statistics (N, or this rank's N / size under sequence parallelism;
  // -1: N).
  static FfnActs plan(const ModelConfig& c, int64_t N, DType compute, DType f, Arena& arena, int64_t norm_rows = -1);

  // res_out[N,C] = res_in[N,C] + FFN output (backward reads res_in again: keep it). Saves `a`.
  // A pending res_in is written by the norm; the returned res_out is pending on f32_nc (block.h)
  // unless sequence parallelism added it here. Scratch: f32_nc [N,C] f32 (down's output; under
  // sequence parallelism also the gathered norm output before conversion). In bf16 mode the norm
  // output and the activation are written straight into a.h and a.a as bf16.
  // seq_nc: [N/size, C] f32 scratch under sequence parallelism (res_in, res_out and the norm
  // statistics then hold this rank's rows; N is a.h's), else absent.
  Residual forward(const TensorView& res_out, const Residual& res_in, const FfnWeights& w, const FfnActs& a,
                   const TensorView& f32_nc, const TensorView& seq_nc = TensorView());

  // Given forward's res_in and `a` (unchanged since), with s.dres = d res_out: grads += into `g`
  // (views of the gradient buffer), s.dres += d res_in through the norm. Uses s.da, s.du (absent in
  // bf16 mode: d u goes to s.grad_c), s.dh and s.grad_c as scratch. The gradients of
  // written_grads(g) are written as weight_grads says (the others always accumulate).
  void backward(const TensorView& res_in, const FfnWeights& w, const FfnWeights& g, const FfnActs& a, Scratch& s,
                kernels::GradWrite weight_grads = kernels::GradWrite::kAccumulate);
  // The gradients that backward() writes with one GEMM each and nothing else: up's and down's weights.
  static std::vector<TensorView> written_grads(const FfnWeights& g) { return {g.up_w, g.down_w}; }

  // x[n,C] += FFN output of n new tokens, in f32: forward over rows [0, n) of chunk scratch `a`;
  // proj [n,C] f32: scratch.
  void decode(const TensorView& x, const FfnWeights& w, const FfnActs& a, const TensorView& proj) {
    materialize(be_, forward(x, x, w, a, proj, TensorView()));
  }

 private:
  kernels::Backend& be_;
  const ModelConfig& c_;
  const TensorParallel* tp_;
};

}  // namespace lmt::model
