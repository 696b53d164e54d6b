#include "lmt/model/norm.h"

namespace lmt::model {

void materialize(kernels::Backend& be, const Residual& r) {
  if (r.pending()) be.add(r.value, r.base, r.add);
}

void norm_forward(kernels::Backend& be, const ModelConfig& c, const TensorView& out, const TensorView& mean,
                  const TensorView& rstd, const Residual& inp, const TensorView& weight, const TensorView& bias) {
  const bool rms = c.norm == NormKind::kRmsNorm;
  if (inp.pending() && rms)
    be.add_rmsnorm_forward(inp.value, out, rstd, inp.base, inp.add, weight, c.norm_eps);
  else if (inp.pending())
    be.add_layernorm_forward(inp.value, out, mean, rstd, inp.base, inp.add, weight, bias, c.norm_eps);
  else if (rms)
    be.rmsnorm_forward(out, rstd, inp.value, weight, c.norm_eps);
  else
    be.layernorm_forward(out, mean, rstd, inp.value, weight, bias, c.norm_eps);
}

void norm_backward(kernels::Backend& be, const ModelConfig& c, const TensorView& dinp, const TensorView& dweight,
                   const TensorView& dbias, const TensorView& dout, const TensorView& inp, const TensorView& weight,
                   const TensorView& mean, const TensorView& rstd, bool accumulate) {
  if (c.norm == NormKind::kRmsNorm)
    be.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, accumulate);
  else
    be.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, accumulate);
}

}  // namespace lmt::model
