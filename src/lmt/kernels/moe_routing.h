// Host-side index bookkeeping of an MoE layer: from each token's chosen experts to the expert-major
// row order the grouped GEMM reads (kernels/backend.h: moe_* ops).
//
// Given experts[N,K] (i32 in [0, E)), every slot (n, k) is routed to expert experts[n,k]. The routed
// rows are grouped by expert, and within an expert ordered by slot index n·K + k (so stable by token
// index). With a capacity (> 0) each expert keeps only its first `capacity` slots in that order; the
// others are dropped (their slot contributes 0; Switch Transformer).
#pragma once

#include <cstdint>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::kernels {

struct MoeRouting {
  std::vector<int64_t> load;      // [E] slots routed to each expert (before capacity)
  std::vector<int64_t> offsets;   // [E+1] kept rows of expert e are [offsets[e], offsets[e+1])
  std::vector<int32_t> row_token; // [R] the token (row of the input) of each kept row
  std::vector<int32_t> slot_row;  // [N·K] the kept row of slot (n,k), or -1 if dropped
  int64_t dropped = 0;            // slots over capacity
  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// capacity 0: dropless. experts: N·K values; an id outside [0, E) is an InvalidArgument naming it.
Status moe_route(const int32_t* experts, int64_t N, int64_t K, int64_t E, int64_t capacity, MoeRouting& out);

// ceil(factor · N · K / E) (at least 1), or 0 (dropless) for factor <= 0.
int64_t moe_capacity(double factor, int64_t N, int64_t K, int64_t E);

}  // namespace lmt::kernels
