// Periodic multiple-choice evaluation during training: a TaskSuite parses and tokenises its tasks
// once (at trainer setup), then run() scores them whenever the trainer's eval interval comes round
// and returns one flat JSON record for metrics.jsonl.
//
// Wiring into a training loop (the model is shared with training):
//   auto suite = TaskSuite::load({{"piqa", ".../piqa/valid.jsonl", 200}}, tokenizer);   // once
//   LMT_ASSIGN_OR_RETURN(auto results, suite->run(model, options));                      // every M steps
//   metrics.write(TaskSuite::metrics_record(results, step, tokens));
// run() re-prepares the model for scoring and, before returning, prepares it again with the B, T and
// RunOptions it found (which also refreshes the bf16 mirror), so the next training forward runs as
// before. Scoring uses the master weights (fp32) unless options.compute says bf16.
// Not thread-safe; the suite itself is immutable after load().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/eval/scoring.h"

namespace lmt::eval {

struct TaskSpec {
  std::string task;   // one of task_names()
  std::string path;   // its data file
  int64_t limit = 0;  // first N items (0: all)
};

class TaskSuite {
 public:
  // Errors: parse_task's (naming file and line) and encode_item's, with the task as context.
  static StatusOr<TaskSuite> load(const std::vector<TaskSpec>& specs, const data::Tokenizer& tokenizer);

  // One result per task, in spec order.
  StatusOr<std::vector<TaskResult>> run(model::Transformer& model, const ScoreOptions& options = {}) const;

  // {"type": "eval", "step", "tokens", "eval_<task>_acc", "eval_<task>_acc_norm_token", "eval_<task>_acc_norm_char",
  //  "eval_<task>_items", "eval_seconds"}.
  static nlohmann::json metrics_record(const std::vector<TaskResult>& results, int64_t step, int64_t tokens);

  size_t size() const { return tasks_.size(); }

 private:
  struct Encoded {
    std::string task;
    std::vector<EncodedItem> items;
  };
  std::vector<Encoded> tasks_;
};

}  // namespace lmt::eval
