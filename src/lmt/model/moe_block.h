// The mixture-of-experts FFN sub-block (the FFN of a layer where config.moe.is_moe_layer(l)):
//   h       = norm(res_in)
//   probs   = softmax(h · router_wᵀ)                       [N,E]
//   experts, weights = top-K of probs (+ selection bias), renormalised when moe.renormalize
//   y_e     = down_e(act(up_e(h rows routed to e)))       (grouped GEMMs over the routed rows)
//   res_out = res_in + Σ_k weights[n,k] · y_{experts[n,k]}[n] + shared(h)
// shared: an ungated dense FFN of hidden Hs = shared_experts·He over every row (absent if 0).
// The FFN kind (GLU or MLP) and activation are config.ffn / config.activation, as for FfnBlock;
// MoE layers have no FFN biases.
//
// Letters: N rows, C d_model, E experts, K = top_k, He expert_ffn, Ue = 2He (GLU) or He,
// Hs = shared_experts·He, Us likewise; R <= N·K the routed rows actually kept (grouped by expert,
// stable by token: kernels/moe_routing.h).
//
// Auxiliary objectives (their gradients are added in backward, scaled by BlockPass-style loss_scale;
// their values are reported in MoeStats, not added to the returned LM loss):
//   aux loss (balance kAuxLoss): coef · E · Σ_e (load_e / N) · mean_n(probs[n,e]) per layer (the
//     per-layer form of Hugging Face's load_balancing_loss_func; load_e counts routed slots).
//   router z-loss (router_z_loss > 0): coef · mean_n(logsumexp(logits[n])²).
// Bias update (kBiasUpdate): `bias` [E] f32 is added to probs for selection only; the weights come
// from the unbiased probs. The Transformer owns it and updates it after each optimizer step.
// Capacity (capacity_factor > 0, training only): each expert keeps its first ceil(f·N·K/E) slots
// in token order; the others are dropped (contribute 0) and counted in MoeStats::dropped.
//
// bf16 convention, gradient contract and threading: as FfnBlock (model/ffn_block.h). The routing
// bookkeeping (kernels/moe_routing.h) runs on the host: on a device backend the chosen experts
// ([N,K] i32), and for the aux and z-loss values probs and lse, are copied to the host once per
// forward, and the routing ([N,K] slots, [R] rows, [E+1] offsets, [E] loads) back; backward reads
// the [E+1] offsets (and the [E] loads for the aux loss) back. Everything else stays on the device.
//
// Expert parallelism (ExpertParallel of P > 1 ranks, training forwards and their backward only;
// docs/MOE.md "Expert parallelism"): routing, capacity, the aux/z losses, the combine and the shared
// experts stay local to each rank (its own N tokens, exactly as without EP). Rank r of the ep group
// computes only experts [r·E/P, (r+1)·E/P): each rank sends the routed rows of every other rank's
// experts there (all_to_all_v of the per-expert row counts, then of the rows), the owner runs its
// experts over the rows of all P ranks (grouped by expert, then by source rank), and the outputs go
// back the same way; backward sends d y to the owners and d x back. Expert weight gradients are
// therefore written only on the owning rank (zero elsewhere); a sum over the data-parallel ranks
// (which the ep group is part of) gives the same total as without EP. A model may hold every
// expert (then inference passes, logits and decoding, compute them all locally) or only its ep
// rank's (config.moe.local_experts: the weights are [E/P, ...] and every pass, inference included,
// must exchange; train/expert_shard_plan.h).
//
// Tensor parallelism (TensorParallel of P > 1 ranks; model/tensor_parallel.h): `config` is the
// rank's shard, every routed and shared expert holding He/P hidden units. The norm, router,
// routing and aux/z losses run redundantly (identical on every rank: the same rows, the replicated
// router). Forward sums the partial MoE output (combine + shared) over the group before the residual
// add, as FfnBlock does after down; backward sums d weights (the combine's gradient, d out · y of
// partial y) before the router's backward, and the experts' d h before adding the router's. Under
// sequence parallelism the norm output is all-gathered, the output and the experts' d h
// reduce-scattered. Composes with expert parallelism: the ep group exchanges each rank's partial
// rows among the ranks of the same tensor-parallel rank.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/kernels/backend.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/tensor/arena.h"

namespace lmt::model {

struct Scratch;  // model/activations.h

// The expert-parallel group as the model sees it (the model never talks to processes itself: the
// trainer binds all_to_all_v to a dist::Communicator, Communicator::all_to_all_v's contract).
struct ExpertParallel {
  int rank = 0, size = 1;
  std::function<Status(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                       const std::vector<int64_t>& recv_bytes)>
      all_to_all_v;
  bool enabled() const { return size > 1; }
};

// Rows an expert-parallel rank may hold for its experts: P ranks × N tokens × min(K, E/P) slots
// (a token chooses distinct experts). ep = 1: N·K.
int64_t moe_expert_rows(const ModelConfig& c, int64_t N, int ep);

struct MoeWeights {
  TensorView norm_w, norm_b;  // [C] master
  TensorView router_w;        // [E, C] GEMM
  TensorView experts_up;      // [E, Ue, C] GEMM
  TensorView experts_down;    // [E, C, He] GEMM
  TensorView shared_up;       // [Us, C] GEMM (shared experts only)
  TensorView shared_down;     // [C, Hs] GEMM (shared experts only)
  static MoeWeights of(const BlockViews& master, const BlockViews& gemm);
};

// What forward saves for backward (N rows; R_max = N·K rows for the routed tensors; under expert
// parallelism xp, u and a hold the rows this rank computes, up to moe_expert_rows(c, N, ep)).
struct MoeActs {
  TensorView norm_mean, norm_rstd;  // [N] f32
  TensorView h;                     // [N,C] compute
  TensorView logits, probs;         // [N,E] f32
  TensorView lse;                   // [N] f32
  TensorView weights;               // [N,K] f32
  TensorView experts, slots;        // [N,K] i32: chosen experts; routed row of each slot or -1
  TensorView row_token;             // [R_max] i32
  TensorView offsets;               // [E+1] i32
  TensorView load;                  // [E] i32: routed slots per expert (before capacity)
  TensorView xp;                    // [R_max,C] compute: h rows in expert order
  TensorView u;                     // [R_max,Ue] f32
  TensorView a;                     // [R_max,He] compute
  TensorView y;                     // [R_max,C] f32: expert outputs
  TensorView shared_u;              // [N,Us] f32 (shared experts only)
  TensorView shared_a;              // [N,Hs] compute
  TensorView ep_counts;             // [P, E/P] i32 (ep > 1): rows rank p sent for each expert of this rank
};

// Backward scratch of the MoE layers (one set, shared by all of them; planned in activations.cpp).
struct MoeScratch {
  TensorView f32_wide;   // [max(R_max·He, N·Hs)] f32: an activation before bf16 conversion
  TensorView dy;         // [R_max,C]
  TensorView da, du;     // [R_max,He], [R_max,Ue]
  TensorView dxp;        // [R_max,C]
  TensorView dlogits;    // [N,E]
  TensorView dweights;   // [N,K]
  TensorView dprobs;     // [E] the aux loss gradient per expert
  TensorView dshared_a, dshared_u;  // [N,Hs], [N,Us]
  TensorView dh2;        // [N,C] a second input gradient to add into Scratch::dh
  TensorView ep_a, ep_b;  // [R_ep·C] f32 each (ep > 1): exchange and reordering buffers (forward too)
};

// One forward's routing statistics (host).
struct MoeStats {
  std::vector<int64_t> load;  // [E] slots routed to each expert
  std::vector<int64_t> computed;  // [E] rows this rank ran through each expert (EP: only its own)
  int64_t dropped = 0;        // slots over capacity
  double aux_loss = 0;        // coef · E · Σ_e (load_e/N) · mean_n(p_ne) (kAuxLoss; else 0)
  double z_loss = 0;          // coef · mean(lse²) (0 when off)
  double imbalance() const;   // max load / mean load (1: uniform)
};

// One MoE layer's statistics summed over the training forwards of an optimizer step.
struct MoeStepStats {
  std::vector<int64_t> load;  // [E] routed slots per expert, summed
  std::vector<int64_t> computed;  // [E] rows this rank computed per expert, summed (not summed over ranks)
  int64_t dropped = 0;        // slots over capacity, summed
  double aux_loss = 0;        // summed over forwards (aux_mean(): per forward)
  double z_loss = 0;
  int64_t forwards = 0;
  void add(const MoeStats& s);
  void add(const MoeStepStats& s);  // another set of forwards' totals (e.g. a pipeline replica's)
  double imbalance() const;   // max load / mean load over the step (1: uniform; 0: no forwards)
  double aux_mean() const { return forwards > 0 ? aux_loss / static_cast<double>(forwards) : 0.0; }
  double z_mean() const { return forwards > 0 ? z_loss / static_cast<double>(forwards) : 0.0; }
};

// max(load) · E / Σ load (0 when nothing was routed).
double load_imbalance(const std::vector<int64_t>& load);

class MoeBlock {
 public:
  // ep: the expert-parallel group for this pass (training), or nullptr / size 1 for none; the acts
  // and scratch must then have been planned for ep->size. It must outlive the block.
  // tp: this rank's tensor-parallel group (config is then its shard: moe.expert_ffn / size), or
  // nullptr / size 1 for none.
  MoeBlock(kernels::Backend& be, const ModelConfig& config, const ExpertParallel* ep = nullptr,
           const TensorParallel* tp = nullptr)
      : be_(be), c_(config), ep_(ep && ep->enabled() ? ep : nullptr), tp_(tp && tp->enabled() ? tp : nullptr) {}

  static MoeActs plan(const ModelConfig& c, int64_t N, DType compute, DType f, Arena& arena, int ep = 1);
  static MoeScratch plan_scratch(const ModelConfig& c, int64_t N, DType compute, DType f, Arena& arena, int ep = 1);
  // Elements of Scratch::grad_c the MoE backward needs for N rows.
  static int64_t grad_c_elems(const ModelConfig& c, int64_t N, int ep = 1);

  // res_out[N,C] = res_in + MoE output; N = res_in's rows (acts planned for at least N rows).
  // bias: [E] f32 selection bias or absent; capacity: 0 dropless. f32_nc [N,C] f32 scratch,
  // f32_wide: MoeScratch::f32_wide (bf16 mode; may be absent otherwise); m: the MoeScratch (needed
  // only under expert or tensor parallelism). Returns the statistics. Under EP or TP every rank of
  // the group must call it (collective); a failed exchange is fatal (LMT_CHECK naming the rank).
  // Sequence parallelism: res_in/res_out hold this rank's N / size rows, the acts all N;
  // seq_nc [N / size, C] f32 scratch (Scratch::seq_nc).
  MoeStats forward(const TensorView& res_out, const TensorView& res_in, const MoeWeights& w, const MoeActs& a,
                   DType compute, const TensorView& bias, int64_t capacity, const TensorView& f32_nc,
                   const TensorView& f32_wide, const MoeScratch* m = nullptr, const TensorView& seq_nc = TensorView());

  // As FfnBlock::backward; loss_scale multiplies the aux and z-loss gradients (the LM loss's
  // gradient arrives in s.dres already scaled). Reads forward's stats (load) from `a`.
  void backward(const TensorView& res_in, const MoeWeights& w, const MoeWeights& g, const MoeActs& a, Scratch& s,
                const MoeScratch& m, float loss_scale);

  // x[n,C] += MoE output of n new tokens in f32 (dropless); proj [n,C] f32 scratch.
  void decode(const TensorView& x, const MoeWeights& w, const MoeActs& a, const TensorView& bias,
              const TensorView& proj) {
    forward(x, x, w, a, DType::kF32, bias, 0, proj, TensorView());
  }

 private:
  kernels::Backend& be_;
  const ModelConfig& c_;
  const ExpertParallel* ep_;
  const TensorParallel* tp_;
};

}  // namespace lmt::model
