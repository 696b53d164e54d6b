// The normalisation a ModelConfig chooses (config.norm: RMSNorm, LayerNorm, LayerNorm without bias),
// forward and backward, with config.norm_eps. Used by every pre-norm of a block, the final norm of
// the Transformer and the decoder, so the choice is made in one place.
//
// Shapes: N rows, C channels. out/dinp/dout/inp [N,C]; mean, rstd [N] (mean is LayerNorm's only:
// RMSNorm ignores it and it may be absent); weight [C]; bias [C] (optional; absent for RMSNorm and
// LayerNorm without bias). Dtypes: f32 (f64 in an f64 run); weight and bias read from the master.
//
// Gradient contract (kernels/backend.h): dweight, dbias +=; dinp = or, with accumulate, += (the
// residual stream).
#pragma once

#include "lmt/kernels/backend.h"
#include "lmt/model/config.h"

namespace lmt::model {

// out = norm(inp) · weight (+ bias); saves mean (LayerNorm) and rstd for backward.
void norm_forward(kernels::Backend& be, const ModelConfig& c, const TensorView& out, const TensorView& mean,
                  const TensorView& rstd, const TensorView& inp, const TensorView& weight, const TensorView& bias);

// dinp (= or += with accumulate), dweight +=, dbias += (optional) from dout and forward's inp, mean, rstd.
void norm_backward(kernels::Backend& be, const ModelConfig& c, const TensorView& dinp, const TensorView& dweight,
                   const TensorView& dbias, const TensorView& dout, const TensorView& inp, const TensorView& weight,
                   const TensorView& mean, const TensorView& rstd, bool accumulate);

}  // namespace lmt::model
