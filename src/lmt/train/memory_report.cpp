#include "lmt/train/memory_report.h"

#include <cstdio>

#include "lmt/plan/memory.h"

namespace lmt::train {

PlannedStateMemory planned_state_memory(const model::ModelConfig& config, int zero, int64_t dp, DType compute,
                                        int64_t ep) {
  plan::MemoryInputs mi;
  mi.config = config;
  mi.zero_stage = (dp > 1 || zero == 3) ? zero : 0;
  mi.dp = dp;
  mi.ep = ep;
  mi.precision = compute == DType::kBF16 ? metrics::Precision::kBf16 : metrics::Precision::kFp32;
  const plan::MemoryBreakdown b = plan::estimate_memory(mi);
  PlannedStateMemory p;
  p.model_states = b.model_states();
  p.optimizer_state = b.adam_m + b.adam_v;
  p.zero3_gather = b.zero3_gather;
  return p;
}

std::string describe_state_memory(int64_t measured_total, int64_t params_grads, int64_t mirror, int64_t optimizer_state,
                                  int64_t gather_buffers, const PlannedStateMemory& plan) {
  const double mib = 1.0 / (1 << 20);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "model state per rank: %.2f MiB (params+grads %.2f, bf16 mirror %.2f, optimizer %.2f, gather buffers "
                "%.2f); plan %.2f MiB (%+.1f%%)",
                measured_total * mib, params_grads * mib, mirror * mib, optimizer_state * mib, gather_buffers * mib,
                plan.total() * mib, plan.total() > 0 ? (measured_total / plan.total() - 1) * 100 : 0.0);
  return buf;
}

}  // namespace lmt::train
