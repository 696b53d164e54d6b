// DecodeWeights: the weights a decoder reads, in the decode weight dtype.
//
// Norm weights, biases and the embeddings always come from the model's f32 master. The GEMM weights
// (q, k, v, o projections, the FFN's up and down, the LM head) come from:
//   kF32   the master itself (no copy; exactly the training forward's weights);
//   kBF16  a bf16 copy (round to nearest even) made once here, or the model's own bf16 mirror when
//          it was prepared for bf16 (the same rounding of the same master, so no copy). The GEMMs
//          then read bf16 weights and f32 activations and accumulate in f32 (kernels::Backend::
//          linear_forward, weight-only bf16): the activations are never rounded, only the weights.
// Decoding one token reads every GEMM weight once, so kBF16 halves the bytes a step reads.
//
// Ownership: references the model (which must outlive it, and whose master must not change while
// a bf16 copy is in use: the copy is not refreshed). Threading: read-only after construction.
#pragma once

#include <cstdint>

#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::eval {

class DecodeWeights {
 public:
  // weights: kF32 or kBF16 (LMT_CHECK; a flag parses it with parse_compute_dtype, tensor/
  // compute_dtype.h). The model's master must be f32.
  DecodeWeights(model::Transformer& model, DType weights);

  DType dtype() const { return dtype_; }
  const model::ModelViews& master() const { return master_; }  // norms, biases, embeddings
  const model::ModelViews& gemm() const { return gemm_; }      // GEMM weights (dtype())
  // Bytes of weights one decode step reads: every GEMM weight of every layer, the LM head's V rows,
  // and one row of each embedding table (the memory-bandwidth bound of decoding).
  int64_t bytes_per_token() const;

 private:
  DType dtype_;
  Tensor copy_;  // the bf16 copy (absent for kF32 or when the model's mirror is used)
  model::ModelViews master_, gemm_;
  int64_t V_;
};

}  // namespace lmt::eval
