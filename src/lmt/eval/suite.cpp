#include "lmt/eval/suite.h"

namespace lmt::eval {

StatusOr<TaskSuite> TaskSuite::load(const std::vector<TaskSpec>& specs, const data::Tokenizer& tokenizer) {
  TaskSuite suite;
  for (const TaskSpec& spec : specs) {
    LMT_ASSIGN_OR_RETURN(std::vector<McItem> items, parse_task(spec.task, spec.path));
    const size_t n = spec.limit > 0 ? std::min(items.size(), static_cast<size_t>(spec.limit)) : items.size();
    Encoded e{spec.task, {}};
    for (size_t i = 0; i < n; ++i) {
      auto enc = encode_item(tokenizer, items[i]);
      if (!enc.ok()) return enc.status().WithContext(spec.task + " (" + spec.path + ")");
      e.items.push_back(std::move(*enc));
    }
    suite.tasks_.push_back(std::move(e));
  }
  return suite;
}

StatusOr<std::vector<TaskResult>> TaskSuite::run(model::Transformer& model, const ScoreOptions& options) const {
  // The plan the caller had (B == 0: never prepared), restored after scoring.
  const int64_t B = model.plan().B, T = model.plan().T;
  const model::RunOptions run_options = model.plan().options;
  std::vector<TaskResult> results;
  Status status;
  for (const Encoded& t : tasks_) {
    auto r = evaluate_encoded(model, t.items, options, t.task);
    if (!r.ok()) {
      status = r.status().WithContext("eval task " + t.task);
      break;
    }
    r->scores.clear();  // per-item scores are not needed in metrics; keep the record small
    results.push_back(std::move(*r));
  }
  if (B > 0) model.prepare(B, T, run_options);
  if (!status.ok()) return status;
  return results;
}

nlohmann::json TaskSuite::metrics_record(const std::vector<TaskResult>& results, int64_t step, int64_t tokens) {
  nlohmann::json j = {{"type", "eval"}, {"step", step}, {"tokens", tokens}};
  double seconds = 0;
  for (const TaskResult& r : results) {
    const std::string p = "eval_" + r.task + "_";
    j[p + "acc"] = r.acc;
    j[p + "acc_norm_token"] = r.acc_norm_token;
    j[p + "acc_norm_char"] = r.acc_norm_char;
    j[p + "items"] = r.items;
    seconds += r.seconds;
  }
  j["eval_seconds"] = seconds;
  return j;
}

}  // namespace lmt::eval
