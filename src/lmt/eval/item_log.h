// Per-item records of a multiple-choice run (`lmtrain eval --items-out FILE`), so that a peer
// (lm-evaluation-harness's --log_samples) can be compared item by item. One JSON object per line,
// in file order, for the items scored (the first --limit):
//   {"task", "index" (0-based item index), "line" (1-based line in the data file),
//    "context" (or "contexts": one per choice, WinoGrande's partial scoring),
//    "choices" (the continuation texts, with their leading separator),
//    "gold", "logprob" [sum log p per choice], "tokens" [continuation tokens per choice],
//    "chars" [acc_norm_char's divisor per choice], "pred", "pred_norm_token", "pred_norm_char"}
// logprob is written with round-trip precision (shortest repr of the double). Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/eval/scoring.h"
#include "lmt/eval/tasks.h"

namespace lmt::eval {

// The record of item `index` (items[index] scored as `scores`).
nlohmann::json item_record(const std::string& task, int64_t index, const McItem& item, const ItemScores& scores);

// All of result.scores as JSONL (one record per line, '\n'-terminated). `items` is the parsed file;
// result.scores[i] belongs to items[i]. kInvalidArgument if result has more scores than items.
StatusOr<std::string> items_jsonl(const std::string& task, const std::vector<McItem>& items, const TaskResult& result);

}  // namespace lmt::eval
