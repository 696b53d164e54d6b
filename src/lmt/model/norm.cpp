#include "lmt/model/norm.h"

namespace lmt::model {

void norm_forward(kernels::Backend& be, const ModelConfig& c, const TensorView& out, const TensorView& mean,
                  const TensorView& rstd, const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  if (c.norm == NormKind::kRmsNorm)
    be.rmsnorm_forward(out, rstd, inp, weight, c.norm_eps);
  else
    be.layernorm_forward(out, mean, rstd, inp, weight, bias, c.norm_eps);
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
