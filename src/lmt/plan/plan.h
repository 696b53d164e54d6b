// The feasibility plan: PlanInputs (what `lmtrain plan` was asked) → PlanReport (everything it
// works out), as JSON (stable keys; scripts rely on them) or a readable table.
//
// Semantics of the time/token inputs:
//   --hours H only : tokens_feasible = throughput × H; the run is H hours.
//   --tokens T only: hours = T / throughput.
//   both           : hours = T / throughput, and the report says whether that fits in H
//                    (and the MFU that T tokens in H hours would require).
//   neither        : the token target is 20 tokens per parameter (Chinchilla rule of thumb).
// Throughput is devices × dense peak × MFU ÷ FLOPs per token, or the claimed --throughput (whose
// implied MFU is reported and flagged above 100%). FLOPs per token are the detailed count when the
// model's shape is known (it includes attention, which 6N omits), else 6N; `flops_basis` says which.
// Both count ACTIVE parameters (MoE: model/flops.h), so time and MFU follow the work a token does;
// memory counts every expert (memory.h, with --ep). The 20-tokens-per-parameter default target
// uses the total parameter count.
// The layout (TP, PP, DP) is the requested one, or the best-ranked of the search when neither --tp
// nor --pp is given. Layouts are ranked by the step-time model (plan/step_time.h): compute at the
// plan's efficiency plus exposed communication plus the pipeline bubble; step_factor is a layout's
// step time over its pure compute time.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/metrics/device_peaks.h"
#include "lmt/model/config.h"
#include "lmt/plan/compute.h"
#include "lmt/plan/memory.h"
#include "lmt/plan/parallelism.h"
#include "lmt/plan/step_time.h"

namespace lmt::plan {

enum class FlopsBasis { kDetailed, kSixN };

struct PlanInputs {
  std::optional<model::ModelConfig> model;  // a preset or config file; else `params`
  double params = 0;                        // --params N (no shape: 6N FLOPs, no activations)
  std::string hardware;                     // metrics::device_names()
  int64_t devices = 1;
  int64_t devices_per_node = 0;             // 0: min(devices, 8) on GPUs, 1 on the CPU
  std::string precision = "bf16";
  std::optional<double> hours, tokens, mfu, throughput, price;
  std::string mfu_source;                   // "" → "assumed" when mfu is given, "default" when not
  FlopsBasis flops_basis = FlopsBasis::kDetailed;
  int64_t seq_len = 0;                      // 0: min(model max_seq_len, 4096); 4096 with --params
  int64_t micro_batch = 1;
  int64_t global_batch = 0;                 // sequences; 0: ≈1M tokens, rounded up to micro_batch·devices
  int zero_stage = 0;
  std::optional<int64_t> tp, pp;           // absent: the best-ranked layout
  int64_t ep = 1;                           // expert parallelism (MoE models): divides DP and num_experts
  bool recompute = false;
  bool flash_attention = true;
  std::string collectives_file;             // --collectives: `bench collectives --json` output (the intra-node link)
};

inline constexpr double kDefaultMfu = 0.40;
// The step-time model's compute efficiency on `--hardware cpu` when no --mfu/--mfu-from is given:
// lmtrain's measured single-process MFU on gpt2-124m/llama-124m (bf16, B=4, T=256) was 57-64%
// (docs/PERFORMANCE.md), rounded down.
inline constexpr double kDefaultCpuEfficiency = 0.55;

// One row of the step-time comparison: a layout under a ZeRO stage, with the model's terms.
struct StepScenario {
  std::string name;  // "DP2", "TP2", "PP2", "DP2 ZeRO-3", "TP2 PP2 DP2", ...
  Layout layout;
  int zero_stage = 0;
  double memory_per_device = 0;
  StepTime time;
};

struct PlanReport {
  PlanInputs inputs;                 // as resolved (defaults filled in)
  std::string model_name;            // preset / file stem, or "params"
  double params = 0;                 // all parameters (every expert)
  double active_params = 0;          // per token (MoE: top_k experts; == params for dense models)
  metrics::DeviceSpec device;
  metrics::Precision precision = metrics::Precision::kBf16;
  double peak_flops_per_device = 0;  // dense
  // Compute.
  double flops_per_token_6n = 0;
  std::optional<double> flops_per_token_detailed;  // needs the shape
  double flops_per_token = 0;                      // the one used (flops_basis)
  std::string flops_basis;                         // "detailed" or "6n"
  double mfu = 0;                    // used for throughput (implied MFU when --throughput is given)
  std::string mfu_source;            // "assumed", "default", "metrics:<file>", "implied by --throughput"
  double tokens_per_second = 0;      // cluster
  std::optional<double> implied_mfu;     // with --throughput
  std::optional<double> required_mfu;    // with --hours and --tokens
  std::optional<double> tokens_feasible; // with --hours
  std::optional<double> hours_to_target; // with a token target
  double tokens = 0;                 // the run's tokens: the target, else tokens_feasible
  std::string tokens_source;         // "--tokens", "--hours", "20 tokens/param"
  double hours = 0;                  // the run's duration: hours_to_target, else --hours
  double total_flops = 0;            // tokens × flops_per_token
  double total_flops_6n = 0;
  double compute_budget_flops = 0;   // FLOPs of the --hours budget, else total_flops
  ChinchillaOptimum chinchilla;
  std::optional<double> cost;        // devices × hours × price
  std::optional<double> budget_cost; // devices × --hours × price
  // Memory and parallelism.
  Layout layout;                     // the chosen one (memory, fits, batch split)
  bool layout_searched = false;      // true when chosen from the search
  std::array<MemoryBreakdown, 4> memory_by_zero;  // the chosen layout under ZeRO 0..3
  ParallelismSearch search;          // ranked by the step-time model (fits first)
  // Step-time model (plan/step_time.h): its links and efficiency, and the comparison rows: every
  // ranked layout under the requested ZeRO stage, and pure DP under ZeRO-3.
  Links links;
  double step_efficiency = 0;
  std::string step_efficiency_source;
  StepTime layout_time;              // of `layout`
  std::vector<StepScenario> step_scenarios;
  // Checks.
  bool implied_mfu_impossible = false;  // implied MFU > 1
  std::optional<bool> target_within_budget;
  std::vector<std::string> warnings;
};

StatusOr<PlanReport> make_plan(const PlanInputs& in);

nlohmann::json to_json(const PlanReport& r);
std::string format_report(const PlanReport& r);  // the human-readable table

}  // namespace lmt::plan
