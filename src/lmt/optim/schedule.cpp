#include "lmt/optim/schedule.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "lmt/base/check.h"

namespace lmt::optim {
namespace {

std::string show(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

bool in_unit(float v, bool open_low, bool open_high) {
  return std::isfinite(v) && (open_low ? v > 0 : v >= 0) && (open_high ? v < 1 : v <= 1);
}

double warmup_factor(int64_t warmup_steps, int64_t step) {
  if (step >= warmup_steps) return 1.0;
  return static_cast<double>(step) / static_cast<double>(warmup_steps);
}

}  // namespace

Status validate(const ScheduleConfig& c) {
  if (c.kind != "cosine" && c.kind != "wsd" && c.kind != "multistep" && c.kind != "constant")
    return InvalidArgument("schedule.kind = '" + c.kind + "' is not a schedule",
                           "valid kinds: cosine, wsd, multistep, constant");
  if (c.warmup_steps < 0)
    return InvalidArgument("schedule.warmup_steps = " + std::to_string(c.warmup_steps) + " must be >= 0",
                           "0 disables the warmup");
  if (!in_unit(c.min_ratio, false, false))
    return InvalidArgument("schedule.min_ratio = " + show(c.min_ratio) + " must be in [0, 1]",
                           "the final lr as a fraction of the peak, e.g. 0.1");
  if (!in_unit(c.decay_fraction, true, false))
    return InvalidArgument("schedule.decay_fraction = " + show(c.decay_fraction) + " must be in (0, 1]",
                           "wsd decays over this final fraction of the run, e.g. 0.2");
  if (!std::isfinite(c.gamma) || c.gamma <= 0 || c.gamma > 1)
    return InvalidArgument("schedule.gamma = " + show(c.gamma) + " must be in (0, 1]",
                           "multistep multiplies the lr by gamma at each drop, e.g. 0.1");
  for (size_t i = 0; i < c.drops.size(); ++i) {
    if (!in_unit(c.drops[i], true, true))
      return InvalidArgument("schedule.drops[" + std::to_string(i) + "] = " + show(c.drops[i]) + " must be in (0, 1)",
                             "drops are fractions of the run, e.g. [0.8, 0.9]");
    if (i > 0 && c.drops[i] <= c.drops[i - 1])
      return InvalidArgument("schedule.drops must increase: drops[" + std::to_string(i) + "] = " + show(c.drops[i]) +
                                 " follows " + show(c.drops[i - 1]),
                             "list the fractions in increasing order, e.g. [0.8, 0.9]");
  }
  if (c.kind == "multistep" && c.drops.empty())
    return InvalidArgument("schedule.drops is empty for schedule.kind = 'multistep'",
                           "give the fractions of the run where the lr drops, e.g. [0.8, 0.9], or use 'constant'");
  return Status::Ok();
}

double lr_multiplier(const ScheduleConfig& c, int64_t step, int64_t total_steps) {
  LMT_CHECK(step >= 1 && total_steps >= 1) << "lr_multiplier: step " << step << " of " << total_steps;
  LMT_CHECK(validate(c).ok()) << "lr_multiplier: invalid schedule: " << validate(c).ToString();
  step = std::min(step, total_steps);
  const double warm = warmup_factor(c.warmup_steps, step);
  const double floor = c.min_ratio;
  double shape = 1.0;
  if (c.kind == "cosine") {
    const int64_t span = total_steps - c.warmup_steps;
    const double p = span <= 0 ? 1.0 : std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
    // A run no longer than its warmup never leaves it; keep the shape at 1 there.
    shape = span <= 0 ? 1.0 : floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  } else if (c.kind == "wsd") {
    const int64_t decay = std::llround(static_cast<double>(c.decay_fraction) * total_steps);
    const int64_t start = total_steps - decay;
    if (decay > 0 && step > start)
      shape = 1.0 - (1.0 - floor) * static_cast<double>(step - start) / static_cast<double>(decay);
  } else if (c.kind == "multistep") {
    for (float f : c.drops)
      if (step > std::llround(static_cast<double>(f) * total_steps)) shape *= c.gamma;
  }
  return warm * shape;
}

int64_t accumulation_steps(int64_t target_accum, int64_t ramp_tokens, int64_t tokens_seen) {
  LMT_CHECK(target_accum >= 1 && ramp_tokens >= 0 && tokens_seen >= 0)
      << "accumulation_steps(" << target_accum << ", " << ramp_tokens << ", " << tokens_seen << ")";
  if (ramp_tokens == 0 || tokens_seen >= ramp_tokens) return target_accum;
  // 128-bit product: (target − 1) · tokens_seen overflows int64 for long runs with large targets.
  const __int128 ramp = static_cast<__int128>(target_accum - 1) * tokens_seen / ramp_tokens;
  return 1 + static_cast<int64_t>(ramp);
}

}  // namespace lmt::optim
