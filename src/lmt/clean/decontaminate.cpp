#include "lmt/clean/decontaminate.h"

#include <filesystem>

#include "lmt/base/xxh64.h"
#include "lmt/eval/tasks.h"

namespace lmt::clean {
namespace {

bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

uint64_t gram_hash(const std::vector<uint64_t>& words, size_t at, size_t n) {
  return xxh64(words.data() + at, n * sizeof(uint64_t), 0x5eed);
}

std::string task_from_name(const std::string& path) {
  const std::string name = path;  // the file or its folder may name the task (eval/openbookqa/test.jsonl)
  for (const char* t : {"arc_challenge", "arc_easy", "openbookqa", "piqa", "hellaswag", "winogrande"})
    if (name.find(t) != std::string::npos) return t;
  if (name.find("obqa") != std::string::npos) return "openbookqa";
  return "";
}

std::string strip_template(std::string s) {
  if (s.starts_with("Question: ")) s.erase(0, 10);
  if (s.ends_with("\nAnswer:")) s.resize(s.size() - 8);
  return s;
}

}  // namespace

std::vector<uint64_t> contamination_words(std::string_view text) {
  std::vector<uint64_t> out;
  std::string w;
  for (size_t i = 0; i <= text.size(); ++i) {
    const auto c = i < text.size() ? static_cast<unsigned char>(text[i]) : 0;
    if (i < text.size() && is_word_byte(c)) {
      w.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
      continue;
    }
    if (!w.empty()) { out.push_back(xxh64(w.data(), w.size())); w.clear(); }
  }
  return out;
}

StatusOr<ContaminationIndex> ContaminationIndex::build(const std::vector<std::string>& specs, int64_t ngram) {
  ContaminationIndex idx;
  idx.ngram_ = ngram;
  const auto n = static_cast<size_t>(ngram);
  for (const std::string& spec : specs) {
    EvalFile f;
    const size_t eq = spec.find('=');
    if (eq != std::string::npos && !std::filesystem::exists(spec)) { f.task = spec.substr(0, eq); f.path = spec.substr(eq + 1); }
    else { f.path = spec; f.task = task_from_name(spec); }
    if (!std::filesystem::exists(f.path))
      return NotFound("--decontaminate " + f.path + " does not exist", "pass eval files in the formats `lmtrain eval` reads (docs/EVAL.md)");
    std::vector<eval::McItem> items;
    if (!f.task.empty()) {
      LMT_ASSIGN_OR_RETURN(items, eval::parse_task(f.task, f.path));
    } else {
      std::string tried;
      for (const std::string& t : eval::task_names()) {
        auto r = eval::parse_task(t, f.path);
        if (r.ok()) { f.task = t; items = std::move(*r); break; }
        tried += "\n  " + t + ": " + r.status().message();
      }
      if (f.task.empty())
        return InvalidArgument("--decontaminate " + f.path + ": no eval task format fits it:" + tried,
                               "name the task: --decontaminate TASK=PATH (tasks: arc_easy, arc_challenge, openbookqa, piqa, hellaswag, winogrande)");
    }
    const auto file_index = static_cast<int32_t>(idx.files_.size());
    for (const eval::McItem& item : items) {
      const auto item_index = static_cast<uint32_t>(idx.items_.size());
      idx.items_.push_back({file_index, item.line});
      std::vector<std::string> texts;
      const std::string ctx = strip_template(item.context);
      if (item.contexts.empty()) texts.push_back(ctx);
      for (size_t c = 0; c < item.choices.size(); ++c) texts.push_back(strip_template(item.context_of(c)) + item.choices[c]);
      bool any = false;
      for (const std::string& t : texts) {
        const std::vector<uint64_t> words = contamination_words(t);
        for (size_t i = 0; i + n <= words.size(); ++i) {
          idx.grams_.try_emplace(gram_hash(words, i, n), item_index);
          any = true;
        }
      }
      ++f.items;
      if (!any) ++f.items_too_short;
    }
    idx.files_.push_back(std::move(f));
  }
  return idx;
}

std::optional<EvalItemRef> ContaminationIndex::find(std::string_view text) const {
  if (grams_.empty()) return std::nullopt;
  const std::vector<uint64_t> words = contamination_words(text);
  const auto n = static_cast<size_t>(ngram_);
  for (size_t i = 0; i + n <= words.size(); ++i) {
    auto it = grams_.find(gram_hash(words, i, n));
    if (it != grams_.end()) return items_[it->second];
  }
  return std::nullopt;
}

}  // namespace lmt::clean
