// Multiple-choice scoring with a progress display (lmt/progress) for `lmtrain eval`: items done of
// the total, items/s, running accuracy and ETA on stderr (a bar on a terminal, plain lines every 10 s
// otherwise, nothing above log level INFO).
//
// The items are scored through eval::evaluate_multiple_choice in consecutive chunks of
// max(64, 8 x batch) items, one progress update per chunk; the chunks' per-item scores are
// concatenated in file order and the accuracies recomputed over all of them (eval::accuracy_of), so
// the result is that of one call over all the items. rows / truncated_rows are summed; seconds and
// items_per_s cover the whole run. The scoring code itself knows nothing of progress.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/eval/scoring.h"
#include "lmt/eval/tasks.h"

namespace lmt::cli {

StatusOr<eval::TaskResult> score_with_progress(model::Transformer& model, const data::Tokenizer& tokenizer,
                                               const std::vector<eval::McItem>& items, int64_t limit,
                                               const eval::ScoreOptions& options, const std::string& task);

}  // namespace lmt::cli
