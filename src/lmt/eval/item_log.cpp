#include "lmt/eval/item_log.h"

namespace lmt::eval {

nlohmann::json item_record(const std::string& task, int64_t index, const McItem& item, const ItemScores& s) {
  const ItemPredictions p = predictions_of(s);
  nlohmann::json j = {{"task", task}, {"index", index}, {"line", item.line}};
  if (item.contexts.empty()) j["context"] = item.context;
  else j["contexts"] = item.contexts;
  j["choices"] = item.choices;
  j["gold"] = s.gold;
  j["logprob"] = s.logprob;
  j["tokens"] = s.tokens;
  j["chars"] = s.chars;
  j["pred"] = p.acc;
  j["pred_norm_token"] = p.norm_token;
  j["pred_norm_char"] = p.norm_char;
  return j;
}

StatusOr<std::string> items_jsonl(const std::string& task, const std::vector<McItem>& items, const TaskResult& result) {
  if (result.scores.size() > items.size())
    return InvalidArgument("items log: " + std::to_string(result.scores.size()) + " scored items but only " +
                           std::to_string(items.size()) + " parsed items");
  std::string out;
  for (size_t i = 0; i < result.scores.size(); ++i) {
    // Replace invalid UTF-8 instead of throwing (the texts come from user files).
    out += item_record(task, static_cast<int64_t>(i), items[i], result.scores[i])
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += '\n';
  }
  return out;
}

}  // namespace lmt::eval
