// Model-state memory of a training rank, measured (DataParallel::model_state_memory: the allocated
// buffers) against `lmtrain plan`'s per-device estimate (plan/memory.h) for the same ZeRO stage
// and data-parallel degree: the trainer's start log and `lmtrain bench train` print both.
#pragma once

#include <cstdint>
#include <string>

#include "lmt/model/config.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

struct PlannedStateMemory {
  double model_states = 0;     // weights + grads + master + Adam m, v (sharded as the stage shards them)
  double optimizer_state = 0;  // Adam m + v
  double zero3_gather = 0;     // two layers' gathered weights (ZeRO 3)
  double total() const { return model_states + zero3_gather; }
};

// plan::estimate_memory's model states for `config` at `zero` over `dp` ranks (zero counts only
// when dp > 1, except stage 3), in the precision of `compute` (bf16: 16 B/param mixed precision; f32: 16),
// with the routed experts split over `ep` of them (plan/memory.h).
PlannedStateMemory planned_state_memory(const model::ModelConfig& config, int zero, int64_t dp, DType compute,
                                        int64_t ep = 1);

// "model state per rank: 12.3 MiB (params+grads 8.0, optimizer 4.0, gather buffers 0.3); plan 12.0 MiB (+2.5%)"
std::string describe_state_memory(int64_t measured_total, int64_t params_grads, int64_t mirror, int64_t optimizer_state,
                                  int64_t gather_buffers, const PlannedStateMemory& plan);

}  // namespace lmt::train
