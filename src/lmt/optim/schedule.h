// Learning-rate schedules and the batch-size (gradient-accumulation) warmup.
//
// lr_multiplier() is the factor in [0, 1] applied to the peak learning rate at a 1-based step of a
// run of total_steps optimizer steps (Optimizer::step's lr_mult). Every kind starts with a linear
// warmup, step / warmup_steps for step < warmup_steps (step 1 already trains; 0 would waste a step),
// then multiplies by its shape, which is 1 until the warmup ends:
//   cosine     min_ratio + (1 − min_ratio)·½(1 + cos(π·p)), p = (step − W)/(total − W) ∈ [0, 1]
//   wsd        1 until the last D = round(decay_fraction·total) steps, then linear to min_ratio:
//              1 − (1 − min_ratio)·(step − (total − D))/D; reaches min_ratio at step = total
//              (linear, the common choice of MiniCPM and Hägele et al. 2024; set min_ratio = 0 to
//              decay to zero)
//   multistep  gamma^k, k = number of drops f with step > round(f·total) (PyTorch's MultiStepLR
//              milestones: the lr drops on the step after the first round(f·total) steps)
//   constant   1
// Steps past total_steps keep the final value. Pure functions: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::optim {

struct ScheduleConfig {
  std::string kind = "cosine";  // "cosine", "wsd", "multistep", "constant"
  int64_t warmup_steps = 0;     // W
  float min_ratio = 0.1f;       // cosine and wsd: the floor, as a fraction of the peak
  float decay_fraction = 0.2f;  // wsd: the final fraction of the run spent decaying
  std::vector<float> drops;     // multistep: increasing fractions of the run in (0, 1)
  float gamma = 0.1f;           // multistep: the factor at each drop
};

// The message names the key ("schedule.kind = 'foo' ..." with the valid kinds in the hint).
Status validate(const ScheduleConfig& c);

// The multiplier at `step` (1-based) of `total_steps` (>= 1). `c` must be valid (LMT_CHECK).
double lr_multiplier(const ScheduleConfig& c, int64_t step, int64_t total_steps);

// Batch-size warmup: the gradient-accumulation micro-steps of the optimizer step that starts after
// `tokens_seen` tokens. Ramps linearly from 1 at 0 tokens to `target_accum` at `ramp_tokens`:
// 1 + floor((target_accum − 1)·tokens_seen / ramp_tokens), then target_accum; ramp_tokens = 0
// means always target_accum. target_accum >= 1, ramp_tokens >= 0, tokens_seen >= 0 (LMT_CHECK).
int64_t accumulation_steps(int64_t target_accum, int64_t ramp_tokens, int64_t tokens_seen);

}  // namespace lmt::optim
