// Mixture planning for the Loader: validates stages and weights, lists each distinct source once
// (the same directory in several stages is one source with one cursor), and draws a row's source.
// Plain values; thread-safe to read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/loader.h"

namespace lmt::data {

struct StagePlan {
  int64_t start_tokens = 0;
  std::vector<int> sources;         // indices into MixturePlan::paths
  std::vector<double> cumulative;   // running sums of the normalised weights; back() == 1
};

struct MixturePlan {
  std::vector<std::string> paths;  // distinct sources in order of first appearance
  std::vector<StagePlan> stages;
};

// kInvalidArgument naming the stage/source: no stage, a first stage not at 0, start_tokens not
// increasing, a stage without sources, a weight that is negative or not finite, a stage whose
// weights sum to 0, an empty path.
StatusOr<MixturePlan> plan_mixture(const std::vector<DataStage>& stages);

// The source a uniform u in [0, 1) selects: the first whose cumulative weight exceeds u
// (zero-weight sources are never chosen).
int draw_source(const StagePlan& stage, double u);

// The stage active at `tokens_seen`, at or after `current` (stages only move forward).
int active_stage(const MixturePlan& plan, int64_t tokens_seen, int current);

}  // namespace lmt::data
