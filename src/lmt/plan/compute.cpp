#include "lmt/plan/compute.h"

#include <cmath>

namespace lmt::plan {

double total_flops(double flops_per_token, double tokens) { return flops_per_token * tokens; }

ChinchillaOptimum chinchilla_optimal(double compute_flops) {
  // Fitted power laws of Hoffmann et al. 2022 as given in issue #7. Their product is ≈ 0.199·C,
  // not exactly C/6: they are fits, not a solution of C = 6ND, so D_opt·N_opt·6 ≈ 1.2·C.
  ChinchillaOptimum o;
  if (compute_flops <= 0) return o;
  o.params = 0.1174 * std::pow(compute_flops, 0.4999);
  o.tokens = 1.6972 * std::pow(compute_flops, 0.5001);
  o.params_20x = std::sqrt(compute_flops / 120.0);
  o.tokens_20x = 20.0 * o.params_20x;
  return o;
}

double tokens_per_second(double devices, double peak_flops_per_device, double mfu, double flops_per_token) {
  if (flops_per_token <= 0) return 0;
  return devices * peak_flops_per_device * mfu / flops_per_token;
}

double tokens_in_hours(double tokens_per_s, double hours) { return tokens_per_s * hours * 3600.0; }

double hours_for_tokens(double tokens_per_s, double tokens) {
  if (tokens_per_s <= 0) return INFINITY;
  return tokens / tokens_per_s / 3600.0;
}

double cost_usd(double devices, double hours, double usd_per_device_hour) {
  return devices * hours * usd_per_device_hour;
}

double implied_mfu(double tokens_per_s, double flops_per_token, double devices, double peak_flops_per_device) {
  const double peak = devices * peak_flops_per_device;
  if (peak <= 0) return 0;
  return tokens_per_s * flops_per_token / peak;
}

}  // namespace lmt::plan
