// Benchmark decontamination: the word n-grams (default 13, as GPT-3's contamination study) of the
// evaluation items that `lmtrain eval` reads (lmt/eval/tasks.h parse_task), and a look-up of a
// document's n-grams in them.
//
// Words: maximal runs of letters and digits (any byte >= 0x80 counts as a letter), ASCII-lowercased;
// everything else separates words, so punctuation and spacing differences do not hide a match.
// The texts of an item: its context without the harness template ("Question: " ... "\nAnswer:"), and
// the context followed by each choice (the full rendered continuation). A text shorter than n words
// contributes no n-gram (counted in items_too_short when all of an item's texts are).
//
// Files are named "TASK=PATH", or PATH alone when the file name holds a task name (arc_easy,
// arc_challenge, openbookqa/obqa, piqa, hellaswag, winogrande); otherwise each task's parser is tried
// in turn. Built once, then find() is const and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::clean {

struct EvalFile {
  std::string task, path;
  int64_t items = 0, items_too_short = 0;
};

struct EvalItemRef {
  int32_t file = 0;   // index into ContaminationIndex::files()
  int64_t line = 0;   // 1-based line of the item in its file
};

class ContaminationIndex {
 public:
  // Errors: kNotFound (a missing file), kInvalidArgument (a file no task parser accepts, with each
  // parser's complaint), kDataLoss (a malformed line of a named task).
  static StatusOr<ContaminationIndex> build(const std::vector<std::string>& specs, int64_t ngram);

  // The first eval item (in document order of the n-grams) sharing an n-gram with `text`.
  std::optional<EvalItemRef> find(std::string_view text) const;

  const std::vector<EvalFile>& files() const { return files_; }
  int64_t ngram() const { return ngram_; }
  size_t size() const { return grams_.size(); }

 private:
  int64_t ngram_ = 13;
  std::vector<EvalFile> files_;
  std::vector<EvalItemRef> items_;
  std::unordered_map<uint64_t, uint32_t> grams_;  // n-gram hash -> index into items_
};

// The word hashes of a text (see the header comment); exposed for tests.
std::vector<uint64_t> contamination_words(std::string_view text);

}  // namespace lmt::clean
