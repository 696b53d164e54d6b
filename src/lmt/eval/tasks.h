// Multiple-choice evaluation tasks: parsers from the published file formats into one McItem form,
// with the prompt templates of EleutherAI's lm-evaluation-harness (the "cloze" formulation: each
// choice is scored as a continuation of the context; docs/EVAL.md has the templates and sources).
//
// Formats (one JSON object per line; blank lines are skipped):
//   arc_easy, arc_challenge  llm-foundry {"query": "Question: …", "choices": [...], "gold": i}, or
//                            canonical ARC {"question": {"stem", "choices": [{text, label}]}, "answerKey"}
//   openbookqa               canonical {"question": {"stem", "choices": [{text, label}]}, "answerKey"}
//   piqa                     canonical {"goal", "sol1", "sol2"} + labels from "label" or the line-aligned
//                            FILE-labels.lst beside FILE.jsonl (valid.jsonl -> valid-labels.lst)
//   winogrande               canonical {"sentence" with one "_", "option1", "option2", "answer": "1"|"2"}
//                            (answer may instead come from FILE-labels.lst)
//   hellaswag                JSONL {"activity_label", "ctx" | "ctx_a"+"ctx_b", "endings", "label"}: the
//                            canonical hellaswag_val.jsonl or the llama.cpp-derived conversion
// Errors name the file and the 1-based line number (kDataLoss for a malformed line, kNotFound for
// a missing file, kInvalidArgument for an unknown task). Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::eval {

// One question. Choice i is scored as log p(choices[i] | ctx_i) where ctx_i = context, or
// contexts[i] when contexts is non-empty (WinoGrande's partial scoring: the option fills the blank
// inside the context, and every choice shares the continuation). Continuations carry their leading
// separator (normally one space), so context + choice is the full text.
struct McItem {
  std::string context;
  std::vector<std::string> choices;
  int gold = 0;                       // index into choices
  std::vector<std::string> contexts;  // per-choice contexts (partial scoring), else empty
  int64_t line = 0;                   // 1-based line in the source file (for messages)

  const std::string& context_of(size_t choice) const { return contexts.empty() ? context : contexts[choice]; }
};

// The task names parse_task() knows, in a stable order.
const std::vector<std::string>& task_names();

// Parses every item of `task` from `path`. See the header comment for the formats.
StatusOr<std::vector<McItem>> parse_task(const std::string& task, const std::string& path);

// The lm-evaluation-harness HellaSwag text clean-up: strip, " [title]" -> ". ", drop "[...]"
// markers, "  " -> " ". Idempotent on already cleaned text (the llama.cpp conversion).
std::string hellaswag_preprocess(const std::string& text);

}  // namespace lmt::eval
