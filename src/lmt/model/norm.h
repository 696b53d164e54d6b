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

// The input of a pre-norm: the residual stream `value` [N,C], or, with `add` present, the stream
// still to be written as value = base + add. The sub-block before the norm leaves its residual add
// pending so that the norm writes the sum and normalises it in one pass
// (Backend::add_layernorm_forward / add_rmsnorm_forward: the same bits as add() then the norm).
struct Residual {
  TensorView value, base, add;
  Residual(const TensorView& v) : value(v) {}  // NOLINT(google-explicit-constructor): a written stream
  Residual(const TensorView& v, const TensorView& b, const TensorView& a) : value(v), base(b), add(a) {}
  bool pending() const { return add.present(); }
};

// Writes a pending residual's value (add()); nothing when it is written already.
void materialize(kernels::Backend& be, const Residual& r);

// out = norm(inp) · weight (+ bias); saves mean (LayerNorm) and rstd for backward. out is inp's
// dtype, or bf16 for an f32 inp (rounded once, as convert() would). A pending inp is written first,
// in the same pass.
void norm_forward(kernels::Backend& be, const ModelConfig& c, const TensorView& out, const TensorView& mean,
                  const TensorView& rstd, const Residual& inp, const TensorView& weight, const TensorView& bias);

// dinp (= or += with accumulate), dweight +=, dbias += (optional) from dout and forward's inp, mean, rstd.
void norm_backward(kernels::Backend& be, const ModelConfig& c, const TensorView& dinp, const TensorView& dweight,
                   const TensorView& dbias, const TensorView& dout, const TensorView& inp, const TensorView& weight,
                   const TensorView& mean, const TensorView& rstd, bool accumulate);

}  // namespace lmt::model
