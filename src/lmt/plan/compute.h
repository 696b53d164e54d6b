// Compute arithmetic of a training run: FLOPs, Chinchilla-optimal sizes, tokens in a time budget,
// time to a token target, cost, and the MFU a claimed throughput implies.
//
// Conventions: FLOPs count 1 multiply-add as 2; "flops per token" is training (forward + backward)
// work per token, either 6·N (Kaplan et al. 2020) or the detailed matmul count (model/flops.h, the
// PaLM/Megatron MFU convention). MFU = achieved model FLOP/s ÷ (devices × dense peak FLOP/s).
// All functions are pure; they take doubles so 1e25-FLOP budgets do not overflow.
#pragma once

namespace lmt::plan {

// Total training FLOPs for `tokens` tokens at `flops_per_token` (e.g. 6·N·D).
double total_flops(double flops_per_token, double tokens);

// Compute-optimal model size and data for a FLOP budget C.
struct ChinchillaOptimum {
  double params = 0;      // N_opt ≈ 0.1174 · C^0.4999
  double tokens = 0;      // D_opt ≈ 1.6972 · C^0.5001
  double params_20x = 0;  // the "20 tokens per parameter" rule: C = 6·N·20N → N = sqrt(C/120)
  double tokens_20x = 0;  // 20 · params_20x
};
ChinchillaOptimum chinchilla_optimal(double compute_flops);

// Sustained cluster throughput in tokens/s at a given MFU.
double tokens_per_second(double devices, double peak_flops_per_device, double mfu, double flops_per_token);
// Tokens processed in `hours` at `tokens_per_s`.
double tokens_in_hours(double tokens_per_s, double hours);
// Hours to process `tokens` at `tokens_per_s`.
double hours_for_tokens(double tokens_per_s, double tokens);
// Cost of holding `devices` for `hours` at `usd_per_device_hour`.
double cost_usd(double devices, double hours, double usd_per_device_hour);
// The MFU that a claimed cluster throughput implies: tokens/s × flops/token ÷ (devices × peak).
// Above 1.0 the claim is impossible on that hardware (or the FLOP count or peak is wrong).
double implied_mfu(double tokens_per_s, double flops_per_token, double devices, double peak_flops_per_device);

}  // namespace lmt::plan
