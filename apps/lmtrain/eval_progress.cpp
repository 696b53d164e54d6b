#include "eval_progress.h"

#include <algorithm>
#include <span>

#include "lmt/base/timer.h"
#include "lmt/progress/progress.h"

namespace lmt::cli {

StatusOr<eval::TaskResult> score_with_progress(model::Transformer& model, const data::Tokenizer& tokenizer,
                                               const std::vector<eval::McItem>& items, int64_t limit,
                                               const eval::ScoreOptions& options, const std::string& task) {
  Timer timer;
  const size_t n = limit > 0 ? std::min(items.size(), static_cast<size_t>(limit)) : items.size();
  const size_t chunk = std::max<size_t>(64, 8 * static_cast<size_t>(std::max<int64_t>(options.batch, 1)));
  progress::Progress bar({.label = "eval " + task, .total = static_cast<int64_t>(n), .rate_unit = "items/s"});
  std::vector<eval::ItemScores> scores;
  scores.reserve(n);
  int64_t rows = 0, truncated = 0, correct = 0;
  for (size_t begin = 0; begin < n; begin += chunk) {
    const size_t end = std::min(n, begin + chunk);
    const std::span<const eval::McItem> part = std::span(items).subspan(begin, end - begin);
    auto r = eval::evaluate_multiple_choice(model, tokenizer, part, 0, options, task);
    if (!r.ok()) {
      bar.clear();
      return r.status();  // its messages name the file's line, the same in any chunk
    }
    rows += r->rows;
    truncated += r->truncated_rows;
    for (eval::ItemScores& s : r->scores) {
      correct += eval::predictions_of(s).acc == s.gold ? 1 : 0;
      scores.push_back(std::move(s));
    }
    const double acc = static_cast<double>(correct) / static_cast<double>(scores.size());
    bar.update(static_cast<int64_t>(scores.size()), {progress::percent("acc", acc)});
  }
  bar.finish();
  eval::TaskResult res = eval::accuracy_of(task, std::move(scores));
  res.rows = rows;
  res.truncated_rows = truncated;
  res.seconds = timer.seconds();
  res.items_per_s = res.seconds > 0 ? static_cast<double>(res.items) / res.seconds : 0;
  return res;
}

}  // namespace lmt::cli
