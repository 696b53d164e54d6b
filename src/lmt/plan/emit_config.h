// `lmtrain plan --emit-config FILE|-`: the chosen layout as a TOML recipe fragment that
// `lmtrain train --config base.toml --config FILE` overlays on a recipe (config::Config::overlay).
//
// The fragment sets exactly these keys (everything else stays the base recipe's):
//   parallel.dp, parallel.tp, parallel.pp, parallel.sp (false: the plan does not model SP),
//   train.zero, train.micro_batch, train.grad_accum (= the layout's m: micro-batches per DP rank
//   per step, which is also the pipeline's micro-batch count), train.seq_len, train.recompute.
// A comment header says what was planned (model, devices, hardware, global batch, predicted step).
// train.micro_batch · train.grad_accum · parallel.dp is the plan's global batch.
#pragma once

#include <string>

#include "lmt/base/status.h"
#include "lmt/plan/plan.h"

namespace lmt::plan {

std::string layout_fragment(const PlanReport& r);

// Writes layout_fragment(r) to `path` atomically ("-": stdout). Refuses (FailedPrecondition) an existing
// file: nothing is overwritten.
Status emit_layout_config(const PlanReport& r, const std::string& path);

}  // namespace lmt::plan
