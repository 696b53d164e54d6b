// eval_tasks_fuzz: the multiple-choice evaluation files (eval/tasks.h: parse_task), every format.
//
// Input: the first byte picks the task (arc_easy, arc_challenge, openbookqa, piqa, hellaswag,
// winogrande); the rest is the JSONL file up to the first NUL byte and, after it, the labels file
// beside it (FILE-labels.lst; absent when there is no NUL). parse_task() must return the items or
// a Status. Checked beyond that: every item has at least two choices, a gold index among them, and
// per-choice contexts for all choices or none.
// Seeds: the first lines of each shared eval file (tests/fuzz/seeds/eval_tasks_fuzz, from
// ../shared/data/eval), and the canonical forms the shared data lacks (ARC, HellaSwag), built here.
//   build-fuzz/bin/eval_tasks_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "lmt/eval/tasks.h"

namespace {

const char* kTasks[] = {"arc_easy", "arc_challenge", "openbookqa", "piqa", "hellaswag", "winogrande"};

void write_seeds(const std::string& dir) {
  auto seed = [&](const char* name, char task, const std::string& jsonl, const char* labels = nullptr) {
    std::string bytes = std::string(1, task) + jsonl;
    if (labels) bytes += std::string(1, '\0') + labels;
    lmt::fuzz::write_file(dir + "/" + name, bytes);
  };
  const std::string ai2 =
      R"({"id": "q1", "question": {"stem": "Which is a gas?", "choices": [{"text": "ice", "label": "A"}, )"
      R"({"text": "steam", "label": "B"}, {"text": "rock", "label": "C"}]}, "answerKey": "B"})" "\n";
  seed("arc_canonical", 0, ai2 + "\n" + ai2);
  seed("openbookqa", 2, ai2);
  seed("arc_foundry", 1, R"({"query": "Question: 2+2?", "choices": ["3", "4"], "gold": 1})" "\n"
                         R"({"query": "no prefix", "choices": ["a", "b", "c"], "gold": "2"})" "\n");
  seed("piqa_labels_file", 3, R"({"goal": "open a jar", "sol1": "twist", "sol2": "push"})" "\n", "0\n");
  seed("piqa_inline", 3, R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 1})" "\r\n");
  seed("hellaswag_canonical", 4,
       R"({"activity_label": "Baking", "ctx_a": "She mixes flour.", "ctx_b": "then she", )"
       R"("endings": ["bakes [title] it.", "sleeps", "runs", "[step] eats"], "label": 0})" "\n");
  seed("hellaswag_llamacpp", 4, R"({"activity_label": "A", "ctx": "x  y", "endings": ["1", "2"], "label": "1"})" "\n");
  seed("winogrande_labels_file", 5,
       R"({"qID": "1", "sentence": "Tom gave _ the book.", "option1": "Ann", "option2": "Bob", "answer": ""})" "\n",
       "2\n");
  seed("winogrande_inline", 5, R"({"sentence": "The cup is _ full.", "option1": "half", "option2": "not", "answer": "1"})");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  bool has_labels = false;
  const auto [jsonl, labels] = lmt::fuzz::split_once(lmt::fuzz::as_view(data + 1, size - 1), '\0', &has_labels);
  const std::string path = lmt::fuzz::write_scratch("eval/valid.jsonl", jsonl);
  const std::string labels_path = lmt::fuzz::scratch_dir() + "/eval/valid-labels.lst";
  if (has_labels) lmt::fuzz::write_file(labels_path, labels);
  else std::filesystem::remove(labels_path);
  auto items = lmt::eval::parse_task(kTasks[data[0] % 6], path);
  if (!items.ok()) return 0;
  for (const lmt::eval::McItem& it : *items) {
    if (it.choices.size() < 2) lmt::fuzz::fail("an item with fewer than two choices");
    if (it.gold < 0 || static_cast<size_t>(it.gold) >= it.choices.size()) lmt::fuzz::fail("gold outside the choices");
    if (!it.contexts.empty() && it.contexts.size() != it.choices.size()) lmt::fuzz::fail("contexts and choices differ");
    for (size_t c = 0; c < it.choices.size(); ++c) (void)it.context_of(c);
  }
  return 0;
}
