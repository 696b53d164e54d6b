// FLOPs per token of a configuration: the 6·N rule and a detailed matmul count.
//
// Detailed (training, per token) = 3 × forward, forward = Σ_layers [ 2·C·(q_dim + 2·kv_dim)  (q,k,v)
//   + 2·q_dim·C (output projection) + 2·C·H·(3 for GLU | 2 for MLP) (FFN) + 4·T·q_dim (scores and
//   weighted values) ] + 2·C·V (LM head). Attention is counted over the full T×T square, the
//   convention of PaLM's and Megatron's MFU formulas, so figures compare with published ones; a
//   causal kernel does about half of those attention FLOPs. Norms, activations and softmax are not
//   counted (they are not matmuls), as in those formulas. 1 multiply-add = 2 FLOPs.
#pragma once

#include <cstdint>

#include "lmt/model/config.h"

namespace lmt::model {

struct FlopsPerToken {
  double six_n = 0;           // 6 · param_count()
  double forward = 0;         // detailed forward
  double training = 0;        // detailed forward + backward (3 × forward)
  double attention_forward = 0;  // the 4·T·q_dim·L part of forward
  double lm_head_forward = 0;    // the 2·C·V part of forward
};

FlopsPerToken flops_per_token(const ModelConfig& c, int64_t seq_len);

}  // namespace lmt::model
