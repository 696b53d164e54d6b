// Gradient bookkeeping around the optimizer: global-norm clipping and gradient-accumulation loss
// scaling.
//
// Clipping (as torch.nn.utils.clip_grad_norm_): norm = ‖grads‖₂ over the whole flat gradient
// buffer (f64 accumulation via Backend::sum_squares); the factor min(1, max_norm / (norm + 1e-6))
// is passed to Optimizer::step as grad_scale, so the gradients are never rewritten. With data
// parallelism each rank sums the squares of its shard and all-reduces the sum before the root.
//
// Accumulation: the gradient of an optimizer step must be the gradient of the mean loss over all
// its valid (non-ignored) target tokens. A micro-batch whose loss is its own mean therefore enters
// with weight micro_tokens / step_tokens (accumulation_loss_scale), which is 1/accum only when
// every micro-batch has the same number of valid tokens. Pure functions except global_grad_norm
// (one backend call); any thread that may call the backend.
#pragma once

#include <cstdint>

#include "lmt/kernels/backend.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::optim {

// ‖grads‖₂ of an f32 (or f64) view of any shape: sqrt(Backend::sum_squares).
double global_grad_norm(kernels::Backend& b, const TensorView& grads);

// min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (clipping off). A non-finite norm gives
// NaN while clipping is on, so a step the caller forgot to skip poisons the weights visibly
// instead of silently applying a zero update; callers check std::isfinite(norm) and skip the step.
float clip_factor(double norm, float max_norm);

// The loss_scale of a micro-batch with micro_tokens valid targets in an optimizer step (summed
// over micro-batches and, with data parallelism, over ranks) of step_tokens valid targets:
// micro_tokens / step_tokens, or 0 when the step has no valid target. 0 <= micro <= step.
float accumulation_loss_scale(int64_t micro_tokens, int64_t step_tokens);

}  // namespace lmt::optim
