#include "lmt/clean/filters.h"

#include <algorithm>
#include <cstdint>
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

// The n-gram statistics below never build n-gram strings: words are interned to ids once, n-grams
// are compared as id ranges (top n-gram: datatrove joins with " ", and words hold no whitespace, so
// two joined n-grams are equal exactly when their word sequences are) or as ranges of the
// concatenated characters (duplicate n-grams: datatrove joins with ""), found through 64-bit
// polynomial prefix hashes and confirmed by comparing the ranges.
constexpr uint64_t kHashBase = 0x9E3779B97F4A7C15ull;

// prefix[i] = hash of xs[0..i); the hash of xs[a..b) is prefix[b] - prefix[a] * pow[b - a].
template <typename T>
void prefix_hashes(const std::vector<T>& xs, std::vector<uint64_t>* prefix, std::vector<uint64_t>* pow) {
  prefix->assign(xs.size() + 1, 0);
  pow->assign(xs.size() + 1, 1);
  for (size_t i = 0; i < xs.size(); ++i) {
    (*prefix)[i + 1] = (*prefix)[i] * kHashBase + static_cast<uint64_t>(xs[i]) + 1;
    (*pow)[i + 1] = (*pow)[i] * kHashBase;
  }
}

uint64_t range_hash(const std::vector<uint64_t>& prefix, const std::vector<uint64_t>& pow, size_t a, size_t b) {
  return prefix[b] - prefix[a] * pow[b - a];
}

std::vector<int32_t> word_ids(const std::vector<U32View>& words) {
  std::unordered_map<U32View, int32_t> ids;
  ids.reserve(words.size() * 2);
  std::vector<int32_t> out;
  out.reserve(words.size());
  for (U32View w : words) out.push_back(ids.try_emplace(w, static_cast<int32_t>(ids.size())).first->second);
  return out;
}

// datatrove find_top_duplicate(): len(g) * count(g) of the most common n-gram g = " ".join(words)
// (ties: the first seen).
int64_t top_ngram_chars(const std::vector<U32View>& words, size_t n) {
  const std::vector<int32_t> ids = word_ids(words);
  std::vector<uint64_t> prefix, pow;
  prefix_hashes(ids, &prefix, &pow);
  struct Entry { size_t first; int64_t count; };
  // hash -> the distinct n-grams with that hash (almost always one).
  std::unordered_map<uint64_t, std::vector<Entry>> counts;
  counts.reserve((words.size() - n + 1) * 2);
  for (size_t i = 0; i + n <= ids.size(); ++i) {
    std::vector<Entry>& bucket = counts[range_hash(prefix, pow, i, i + n)];
    auto same = [&](const Entry& e) { return std::equal(ids.begin() + i, ids.begin() + i + n, ids.begin() + e.first); };
    auto it = std::find_if(bucket.begin(), bucket.end(), same);
    if (it == bucket.end()) bucket.push_back({i, 1});
    else ++it->count;
  }
  const Entry* best = nullptr;
  for (const auto& [h, bucket] : counts)
    for (const Entry& e : bucket)
      if (best == nullptr || e.count > best->count || (e.count == best->count && e.first < best->first)) best = &e;
  if (best == nullptr) return 0;
  int64_t len = static_cast<int64_t>(n) - 1;  // the separating spaces
  for (size_t k = 0; k < n; ++k) len += static_cast<int64_t>(words[best->first + k].size());
  return len * best->count;
}

// datatrove find_all_duplicate(): characters of n-grams g = "".join(words) seen before, skipping
// past each repeated one.
int64_t all_duplicate_chars(const std::vector<U32View>& words, size_t n) {
  std::vector<char32_t> chars;  // every word's characters, concatenated
  std::vector<size_t> offset(words.size() + 1, 0);
  for (size_t i = 0; i < words.size(); ++i) {
    chars.insert(chars.end(), words[i].begin(), words[i].end());
    offset[i + 1] = chars.size();
  }
  std::vector<uint64_t> prefix, pow;
  prefix_hashes(chars, &prefix, &pow);
  // hash -> word indices of the distinct n-grams seen with that hash.
  std::unordered_map<uint64_t, std::vector<size_t>> seen;
  seen.reserve(words.size() * 2);
  int64_t dup = 0;
  size_t i = 0;
  while (i + n <= words.size()) {
    const size_t a = offset[i], b = offset[i + n];
    std::vector<size_t>& bucket = seen[range_hash(prefix, pow, a, b)];
    auto same = [&](size_t j) {
      const size_t c = offset[j], d = offset[j + n];
      return d - c == b - a && std::equal(chars.begin() + a, chars.begin() + b, chars.begin() + c);
    };
    if (std::any_of(bucket.begin(), bucket.end(), same)) {
      dup += static_cast<int64_t>(b - a);
      i += n;
    } else {
      bucket.push_back(i);
      ++i;
    }
  }
  return dup;
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
  // The distinct stop words present (the list is short: compare views, no string per word).
  std::vector<U32> stop;
  for (const auto& w : o.stop_words) {
    U32 u = decode_utf8(w);
    if (std::find(stop.begin(), stop.end(), u) == stop.end()) stop.push_back(std::move(u));
  }
  std::vector<char> present(stop.size(), 0);
  for (U32View w : words)
    for (size_t k = 0; k < stop.size(); ++k)
      if (!present[k] && w == U32View(stop[k])) present[k] = 1;
  s->stop_words = std::count(present.begin(), present.end(), 1);

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
