// The heuristic document filters, with the definitions and default thresholds of datatrove 0.10.1
// (docs/DATA_CLEAN.md names the paper each rule comes from):
//   GopherRepetition  datatrove GopherRepetitionFilter (Rae et al. 2021, Gopher, table A1)
//   GopherQuality     datatrove GopherQualityFilter (Gopher, section A.1.1)
//   C4                datatrove C4QualityFilter (Raffel et al. 2020, C4; drops lines, may drop the doc)
//   FineWeb           datatrove FineWebQualityFilter (Penedo et al. 2024, FineWeb)
// As in datatrove, a threshold of 0 switches its rule off (Python's `if self.x and ...`), the rules
// of one filter run in datatrove's order and the first failing one names the reason.
//
// Every function takes the text as code points (text.h) and is pure and thread-safe. A verdict's
// reason is datatrove's reason string ("gopher_short_doc", "dup_line_frac", "lorem_ipsum", ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/clean/text.h"

namespace lmt::clean {

struct Verdict {
  bool keep = true;
  std::string reason;  // why it was removed ("" when kept)
};

struct GopherQualityOptions {
  bool enabled = true;
  int64_t min_doc_words = 50, max_doc_words = 100000;
  double min_avg_word_length = 3, max_avg_word_length = 10;
  double max_symbol_word_ratio = 0.1;
  double max_bullet_lines_ratio = 0.9;
  double max_ellipsis_lines_ratio = 0.3;
  double max_non_alpha_words_ratio = 0.8;  // the least fraction of words with a letter (datatrove's name)
  int64_t min_stop_words = 2;
  std::vector<std::string> stop_words = {"the", "be", "to", "of", "and", "that", "have", "with"};
};

// The signals of the Gopher quality rules (for the report's histograms); all computed.
struct GopherQualitySignals {
  int64_t words = 0;            // non-symbol words
  double mean_word_length = 0;  // over non-symbol words
  double hash_ratio = 0, ellipsis_ratio = 0, bullet_lines = 0, ellipsis_lines = 0, alpha_words = 0;
  int64_t stop_words = 0;       // distinct stop words present
};

Verdict gopher_quality(U32View text, const std::vector<U32View>& words, const GopherQualityOptions& o,
                       GopherQualitySignals* signals);

struct GopherRepetitionOptions {
  bool enabled = true;
  double dup_line_frac = 0.3, dup_para_frac = 0.3, dup_line_char_frac = 0.2, dup_para_char_frac = 0.2;
  std::vector<std::pair<int, double>> top_n_grams = {{2, 0.2}, {3, 0.18}, {4, 0.16}};
  std::vector<std::pair<int, double>> dup_n_grams = {{5, 0.15}, {6, 0.14}, {7, 0.13}, {8, 0.12}, {9, 0.11}, {10, 0.10}};
};

struct GopherRepetitionSignals {
  double dup_para_frac = 0, dup_para_char_frac = 0, dup_line_frac = 0, dup_line_char_frac = 0;
};

Verdict gopher_repetition(U32View text, const std::vector<U32View>& words, const GopherRepetitionOptions& o,
                          GopherRepetitionSignals* signals);

struct C4Options {
  bool enabled = true;
  bool remove_citations = true;
  bool filter_no_terminal_punct = true;
  int64_t min_num_sentences = 5;   // -1: off
  int64_t min_words_per_line = 3;  // -1: off
  int64_t max_word_length = 1000;  // -1: off
  bool filter_lorem_ipsum = true, filter_javascript = true, filter_curly_bracket = true, filter_policy = true;
};

struct C4Signals {
  int64_t lines = 0, lines_kept = 0, sentences = 0;
};

// Keeps or drops the document; when kept, *out is the text with the failing lines dropped
// ("\n".join(kept lines).strip()). *out may alias nothing else.
Verdict c4_quality(U32View text, const C4Options& o, U32* out, C4Signals* signals);

// Sentences in one line (datatrove uses spaCy's sentencizer): approximated as a run of . ! ? (with closing quotes or
// brackets after it) followed by whitespace and more text, plus one for the line's last sentence.
int64_t count_sentences(U32View line);

struct FineWebOptions {
  bool enabled = true;
  double line_punct_thr = 0.12;
  bool line_punct_exclude_zero = false;
  double short_line_thr = 0.67;
  int64_t short_line_length = 30;
  double char_duplicates_ratio = 0.01;
  double new_line_ratio = 0.3;
};

struct FineWebSignals {
  double line_punct_ratio = 0, short_line_ratio = 0, char_dup_ratio = 0, list_ratio = 0;
};

Verdict fineweb_quality(U32View text, const std::vector<U32View>& words, const FineWebOptions& o,
                        FineWebSignals* signals);

}  // namespace lmt::clean
