#include "lmt/optim/gradients.h"

#include <cmath>
#include <limits>

#include "lmt/base/check.h"

namespace lmt::optim {

double global_grad_norm(kernels::Backend& b, const TensorView& grads) { return std::sqrt(b.sum_squares(grads)); }

float clip_factor(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  if (!std::isfinite(norm)) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(std::min(1.0, static_cast<double>(max_norm) / (norm + 1e-6)));
}

float accumulation_loss_scale(int64_t micro_tokens, int64_t step_tokens) {
  LMT_CHECK(micro_tokens >= 0 && micro_tokens <= step_tokens)
      << "accumulation_loss_scale(" << micro_tokens << ", " << step_tokens << ")";
  if (step_tokens == 0) return 0.0f;
  return static_cast<float>(static_cast<double>(micro_tokens) / static_cast<double>(step_tokens));
}

}  // namespace lmt::optim
