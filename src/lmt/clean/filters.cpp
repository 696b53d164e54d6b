#include "lmt/clean/filters.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace lmt::clean {
namespace {

Verdict drop(const char* reason) { return {false, reason}; }

bool has_non_punctuation(U32View w) {
  return std::any_of(w.begin(), w.end(), [](char32_t c) { return !is_punctuation(c); });
}

// datatrove find_duplicates(): (elements seen before, their total length).
std::pair<int64_t, int64_t> find_duplicates(const std::vector<U32View>& xs) {
  std::unordered_set<U32View> seen;
  seen.reserve(xs.size() * 2);
  int64_t elements = 0, chars = 0;
  for (U32View x : xs) {
    if (!seen.insert(x).second) { ++elements; chars += static_cast<int64_t>(x.size()); }
  }
  return {elements, chars};
}

U32 join(const std::vector<U32View>& words, size_t begin, size_t n, U32View sep) {
  U32 s;
  for (size_t k = 0; k < n; ++k) {
    if (k > 0) s += sep;
    s += words[begin + k];
  }
  return s;
}

// datatrove find_top_duplicate(): len(g) * count(g) of the most common n-gram (ties: the first seen).
int64_t top_ngram_chars(const std::vector<U32View>& words, size_t n) {
  struct Entry { int64_t count = 0; size_t first = 0; };
  std::unordered_map<U32, Entry> counts;
  for (size_t i = 0; i + n <= words.size(); ++i) {
    auto [it, fresh] = counts.try_emplace(join(words, i, n, U" "));
    if (fresh) it->second.first = i;
    ++it->second.count;
  }
  const U32* best = nullptr;
  Entry be;
  for (const auto& [g, e] : counts)
    if (best == nullptr || e.count > be.count || (e.count == be.count && e.first < be.first)) { best = &g; be = e; }
  return best ? static_cast<int64_t>(best->size()) * be.count : 0;
}

// datatrove find_all_duplicate(): characters of n-grams ("".join) repeated, skipping past each.
int64_t all_duplicate_chars(const std::vector<U32View>& words, size_t n) {
  std::unordered_set<U32> seen;
  int64_t chars = 0;
  size_t i = 0;
  while (i + n <= words.size()) {
    U32 g = join(words, i, n, U"");
    const auto len = static_cast<int64_t>(g.size());
    if (seen.count(g)) { chars += len; i += n; }
    else { seen.insert(std::move(g)); ++i; }
  }
  return chars;
}

}  // namespace

Verdict gopher_quality(U32View text, const std::vector<U32View>& words, const GopherQualityOptions& o,
                       GopherQualitySignals* s) {
  GopherQualitySignals local;
  if (s == nullptr) s = &local;
  const auto n_words = static_cast<double>(words.size());
  int64_t non_symbol = 0, non_symbol_chars = 0, alpha = 0;
  for (U32View w : words) {
    if (has_non_punctuation(w)) { ++non_symbol; non_symbol_chars += static_cast<int64_t>(w.size()); }
    if (std::any_of(w.begin(), w.end(), py_isalpha)) ++alpha;
  }
  s->words = non_symbol;
  s->mean_word_length = non_symbol > 0 ? static_cast<double>(non_symbol_chars) / static_cast<double>(non_symbol) : 0;
  const double hashes = static_cast<double>(count_of(text, U"#"));
  const double ellipses = static_cast<double>(count_of(text, U"...") + count_of(text, U"…"));
  s->hash_ratio = n_words > 0 ? hashes / n_words : 0;
  s->ellipsis_ratio = n_words > 0 ? ellipses / n_words : 0;
  const std::vector<U32View> lines = py_splitlines(text);
  int64_t bullets = 0, ellipsis_lines = 0;
  for (U32View l : lines) {
    const U32View a = py_lstrip(l), b = py_rstrip(l);
    if (starts_with(a, U"•") || starts_with(a, U"-")) ++bullets;
    if (ends_with(b, U"...") || ends_with(b, U"…")) ++ellipsis_lines;
  }
  const double n_lines = static_cast<double>(lines.size());
  s->bullet_lines = n_lines > 0 ? static_cast<double>(bullets) / n_lines : 0;
  s->ellipsis_lines = n_lines > 0 ? static_cast<double>(ellipsis_lines) / n_lines : 0;
  s->alpha_words = n_words > 0 ? static_cast<double>(alpha) / n_words : 0;
  std::unordered_set<U32> stop;
  for (const auto& w : o.stop_words) stop.insert(decode_utf8(w));
  std::unordered_set<U32> present;
  for (U32View w : words)
    if (stop.count(U32(w))) present.insert(U32(w));
  s->stop_words = static_cast<int64_t>(present.size());

  if (o.min_doc_words && non_symbol < o.min_doc_words) return drop("gopher_short_doc");
  if (o.max_doc_words && non_symbol > o.max_doc_words) return drop("gopher_long_doc");
  if (non_symbol > 0) {  // numpy's mean of nothing is NaN, which fails no comparison
    if (o.min_avg_word_length != 0 && s->mean_word_length < o.min_avg_word_length) return drop("gopher_below_avg_threshold");
    if (o.max_avg_word_length != 0 && s->mean_word_length > o.max_avg_word_length) return drop("gopher_above_avg_threshold");
  }
  if (n_words > 0 && o.max_symbol_word_ratio != 0) {
    if (s->hash_ratio > o.max_symbol_word_ratio) return drop("gopher_too_many_hashes");
    if (s->ellipsis_ratio > o.max_symbol_word_ratio) return drop("gopher_too_many_ellipsis");
  }
  if (n_lines > 0) {
    if (o.max_bullet_lines_ratio != 0 && s->bullet_lines > o.max_bullet_lines_ratio) return drop("gopher_too_many_bullets");
    if (o.max_ellipsis_lines_ratio != 0 && s->ellipsis_lines > o.max_ellipsis_lines_ratio) return drop("gopher_too_many_end_ellipsis");
  }
  if (n_words > 0 && o.max_non_alpha_words_ratio != 0 && s->alpha_words < o.max_non_alpha_words_ratio)
    return drop("gopher_below_alpha_threshold");
  if (o.min_stop_words && s->stop_words < o.min_stop_words) return drop("gopher_enough_stop_words");
  return {};
}

Verdict gopher_repetition(U32View text, const std::vector<U32View>& words, const GopherRepetitionOptions& o,
                          GopherRepetitionSignals* s) {
  GopherRepetitionSignals local;
  if (s == nullptr) s = &local;
  if (text.empty()) return drop("empty");
  const double len = static_cast<double>(text.size());
  const std::vector<U32View> paragraphs = split_runs(py_strip(text), U'\n', 2);
  auto [para_dups, para_chars] = find_duplicates(paragraphs);
  s->dup_para_frac = static_cast<double>(para_dups) / static_cast<double>(paragraphs.size());
  s->dup_para_char_frac = static_cast<double>(para_chars) / len;
  const std::vector<U32View> lines = split_runs(text, U'\n', 1);
  auto [line_dups, line_chars] = find_duplicates(lines);
  s->dup_line_frac = static_cast<double>(line_dups) / static_cast<double>(lines.size());
  s->dup_line_char_frac = static_cast<double>(line_chars) / len;
  if (o.dup_para_frac != 0 && s->dup_para_frac > o.dup_para_frac) return drop("dup_para_frac");
  if (o.dup_para_char_frac != 0 && s->dup_para_char_frac > o.dup_para_char_frac) return drop("dup_para_char_frac");
  if (o.dup_line_frac != 0 && s->dup_line_frac > o.dup_line_frac) return drop("dup_line_frac");
  if (o.dup_line_char_frac != 0 && s->dup_line_char_frac > o.dup_line_char_frac) return drop("dup_line_char_frac");
  for (const auto& [n, frac] : o.top_n_grams) {
    if (n <= 0 || words.size() < static_cast<size_t>(n)) continue;
    if (static_cast<double>(top_ngram_chars(words, static_cast<size_t>(n))) / len > frac)
      return {false, "top_" + std::to_string(n) + "_gram"};
  }
  for (const auto& [n, frac] : o.dup_n_grams) {
    if (n <= 0) continue;
    if (static_cast<double>(all_duplicate_chars(words, static_cast<size_t>(n))) / len > frac)
      return {false, "duplicated_" + std::to_string(n) + "_n_grams"};
  }
  return {};
}

int64_t count_sentences(U32View line) {
  line = py_strip(line);
  if (line.empty()) return 0;
  int64_t n = 1;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '.' && line[i] != '!' && line[i] != '?') continue;
    size_t j = i;
    while (j < line.size() && (line[j] == '.' || line[j] == '!' || line[j] == '?')) ++j;
    while (j < line.size() && (line[j] == '"' || line[j] == '\'' || line[j] == ')' || line[j] == ']' ||
                               line[j] == 0x201D || line[j] == 0x2019))
      ++j;
    if (j < line.size() && py_isspace(line[j])) {
      size_t k = j;
      while (k < line.size() && py_isspace(line[k])) ++k;
      if (k < line.size()) ++n;
    }
    i = j;
  }
  return n;
}

namespace {

// CITATION_REGEX = r"\[\d*]|\[edit]|\[citation needed]" removed.
U32 remove_citations(U32View line) {
  U32 out;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == '[') {
      size_t j = i + 1;
      while (j < line.size() && line[j] >= '0' && line[j] <= '9') ++j;
      size_t skip = 0;
      if (j < line.size() && line[j] == ']') skip = j + 1 - i;
      else if (starts_with(line.substr(i), U"[edit]")) skip = 6;
      else if (starts_with(line.substr(i), U"[citation needed]")) skip = 17;
      if (skip > 0) { i += skip; continue; }
    }
    out.push_back(line[i++]);
  }
  return out;
}

bool ends_in_terminal_punctuation(U32View line) {
  if (line.empty()) return false;
  const char32_t c = line.back();
  return c == '.' || c == '?' || c == '!' || c == '"' || c == '\'';
}

}  // namespace

Verdict c4_quality(U32View text, const C4Options& o, U32* out, C4Signals* s) {
  C4Signals local;
  if (s == nullptr) s = &local;
  static const U32View kPolicy[] = {U"terms of use", U"privacy policy", U"cookie policy",
                                    U"uses cookies", U"use of cookies", U"use cookies"};
  std::vector<U32> kept;
  int64_t sentences = 0;
  for (U32View raw : py_splitlines(text)) {
    ++s->lines;
    const U32View stripped = py_strip(raw);
    const std::vector<U32View> words = py_split(stripped);
    if (o.max_word_length != -1 &&
        std::any_of(words.begin(), words.end(), [&](U32View w) { return static_cast<int64_t>(w.size()) > o.max_word_length; }))
      continue;
    U32 line = o.remove_citations ? remove_citations(stripped) : U32(stripped);
    if (o.filter_no_terminal_punct && (!ends_in_terminal_punctuation(line) || ends_with(line, U"..."))) continue;
    if (static_cast<int64_t>(words.size()) < o.min_words_per_line) continue;
    const U32 lower = ascii_lower(line);
    if (o.filter_lorem_ipsum && lower.find(U"lorem ipsum") != U32::npos) return drop("lorem_ipsum");
    if (o.filter_javascript && lower.find(U"javascript") != U32::npos) continue;
    if (o.filter_curly_bracket && line.find(U'{') != U32::npos) return drop("curly_bracket");
    if (o.filter_policy &&
        std::any_of(std::begin(kPolicy), std::end(kPolicy), [&](U32View p) { return lower.find(p) != U32::npos; }))
      continue;
    if (o.min_num_sentences != -1) sentences += count_sentences(line);
    kept.push_back(std::move(line));
  }
  s->lines_kept = static_cast<int64_t>(kept.size());
  s->sentences = sentences;
  if (sentences < o.min_num_sentences) return drop("too_few_sentences");
  U32 joined;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (i > 0) joined.push_back('\n');
    joined += kept[i];
  }
  *out = U32(py_strip(joined));
  return {};
}

Verdict fineweb_quality(U32View text, const std::vector<U32View>& words, const FineWebOptions& o, FineWebSignals* s) {
  FineWebSignals local;
  if (s == nullptr) s = &local;
  std::vector<U32View> lines;
  for (U32View l : split_on(text, U'\n'))
    if (!py_strip(l).empty()) lines.push_back(l);
  if (lines.empty()) return drop("empty");
  const double n = static_cast<double>(lines.size());
  int64_t punct = 0, short_lines = 0;
  for (U32View l : lines) {
    if (is_terminal_punctuation(l.back())) ++punct;
    if (static_cast<int64_t>(l.size()) <= o.short_line_length) ++short_lines;
  }
  s->line_punct_ratio = static_cast<double>(punct) / n;
  s->short_line_ratio = static_cast<double>(short_lines) / n;
  const int64_t newlines = static_cast<int64_t>(count_of(text, U"\n"));
  const double chars = static_cast<double>(static_cast<int64_t>(text.size()) - newlines);
  s->char_dup_ratio = chars > 0 ? static_cast<double>(find_duplicates(lines).second) / chars : 0;
  s->list_ratio = words.empty() ? 0 : static_cast<double>(newlines) / static_cast<double>(words.size());
  if (s->line_punct_ratio < o.line_punct_thr && !(s->line_punct_ratio == 0 && o.line_punct_exclude_zero))
    return drop("line_punct_ratio");
  if (s->short_line_ratio > o.short_line_thr) return drop("short_line_ratio");
  if (s->char_dup_ratio > o.char_duplicates_ratio) return drop("char_dup_ratio");
  if (s->list_ratio > o.new_line_ratio) return drop("list_ratio");
  return {};
}

}  // namespace lmt::clean
