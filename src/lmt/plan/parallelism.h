// Search over (TP, PP, DP) layouts for a device count, with the batch arithmetic of each.
//
// A layout is valid when
//   TP divides the devices per node (TP across nodes is forbidden: its all-reduces sit on the
//   critical path of every layer and need NVLink-class bandwidth), n_heads, n_kv_heads (KV-head
//   replication is not modelled) and ffn_hidden;
//   PP divides n_layers (equal stages);
//   MoE: TP divides moe.expert_ffn (experts are split like the dense FFN); EP (MemoryInputs::ep,
//   given, not searched) divides DP;
//   DP = devices / (TP·PP) is whole, and micro_batch × DP divides the global batch, giving
//   gradient accumulation m = global_batch / (micro_batch × DP), which is also the number of
//   micro-batches a pipeline sees per step.
// Each valid layout is costed: step time = ideal compute time (global batch tokens × FLOPs/token ÷
// (devices × peak × MFU)) × (1 + bubble) × (1 + 0.03·log2 TP), with the 1F1B bubble (p−1)/(m+p−1)
// (Narayanan et al. 2021) and the TP term standing for the intra-node all-reduces that TP adds
// (a planning figure, not a measurement). DP gradient reduction is assumed overlapped with backward.
// Ranked: layouts that fit in memory first, then by step time, then by memory. Every rejected
// combination is kept with the reason, so "why not TP 8?" has an answer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/plan/memory.h"

namespace lmt::plan {

struct Layout {
  int64_t tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 1;
  int64_t grad_accum = 1;    // m: micro-batches per DP rank per step
  double bubble = 0;         // (p−1)/(m+p−1)
  double step_factor = 1;    // step time ÷ ideal compute time (make_plan: from the step-time model)
  double step_seconds = 0;   // estimated (0 when throughput is unknown; make_plan: the step-time model)
  MemoryBreakdown memory;
  bool fits = false;
};

struct RejectedLayout {
  int64_t tp = 1, pp = 1;
  std::string reason;
};

struct ParallelismInputs {
  MemoryInputs memory;        // model, precision, seq, micro-batch, ZeRO, recompute (tp/pp/dp ignored)
  int64_t devices = 1;
  int64_t devices_per_node = 1;
  int64_t global_batch = 0;   // sequences per optimizer step
  double ideal_step_seconds = 0;  // global batch compute at the plan's MFU on all devices (0: unknown)
  double device_memory_bytes = 0;
};

struct ParallelismSearch {
  std::vector<Layout> ranked;  // best first
  std::vector<RejectedLayout> rejected;
};

// Why (tp, pp, dp) cannot run this model on this cluster; empty when it can (batch aside).
std::string layout_problem(const ParallelismInputs& in, int64_t tp, int64_t pp);

// The costed layout (tp, pp); InvalidArgument explaining the problem when it is not valid.
StatusOr<Layout> evaluate_layout(const ParallelismInputs& in, int64_t tp, int64_t pp);

// Every (TP, PP) pair with TP·PP dividing the device count, ranked or rejected. Enumerates
// divisors only (O(sqrt(devices)) to find them), so it is fast for any device count.
ParallelismSearch search_layouts(const ParallelismInputs& in);

// The divisors of n >= 1, ascending.
std::vector<int64_t> divisors(int64_t n);

// 1F1B pipeline bubble fraction for p stages and m micro-batches.
double pipeline_bubble(int64_t p, int64_t m);

}  // namespace lmt::plan
