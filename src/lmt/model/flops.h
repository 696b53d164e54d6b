// FLOPs per token of a configuration: the 6·N rule and a detailed matmul count.
//
// Detailed (training, per token) = 3 × forward, forward = Σ_layers [ 2·C·(q_dim + 2·kv_dim)  (q,k,v)
//   + 2·q_dim·C (output projection) + 2·C·H·(3 for GLU | 2 for MLP) (FFN) + 4·T·q_dim (scores and
//   weighted values) ] + 2·C·V (LM head). Attention is counted over the full T×T square, the
//   convention of PaLM's and Megatron's MFU formulas, so figures compare with published ones; a
//   causal kernel does about half of those attention FLOPs. Norms, activations and softmax are not
//   counted (they are not matmuls), as in those formulas. 1 multiply-add = 2 FLOPs.
//
// MoE (docs/MOE.md): both formulas count the ACTIVE parameters, the work one token does, so MFU
// and planning compare with dense models of the same active size. 6N uses active_param_count();
// the detailed FFN term of an MoE layer is the router GEMM 2·C·E plus (top_k + shared_experts) ·
// 2·C·expert_ffn·(3 | 2); dense layers (moe.every > 1) keep 2·C·H·(3 | 2). Routing, permutation
// and the combine are not matmuls and are not counted; neither are dropped tokens discounted.
#pragma once

#include <cstdint>

#include "lmt/model/config.h"

namespace lmt::model {

struct FlopsPerToken {
  double six_n = 0;           // 6 · active_param_count() (== param_count() for dense models)
  double forward = 0;         // detailed forward
  double training = 0;        // detailed forward + backward (3 × forward)
  double attention_forward = 0;  // the 4·T·q_dim·L part of forward
  double lm_head_forward = 0;    // the 2·C·V part of forward
  double ffn_forward = 0;        // the FFN part of forward (dense layers + MoE layers' active experts)
};

FlopsPerToken flops_per_token(const ModelConfig& c, int64_t seq_len);

}  // namespace lmt::model
