// CleanOptions: every setting of `lmtrain data clean`, read from a TOML file (--config clean.toml).
// Keys are "section.name"; every key and its default is listed by clean_keys() and in
// docs/DATA_CLEAN.md. An unknown key or a value of the wrong type is an error naming the file and
// the key (with the closest valid key); a file that does not parse names the line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/clean/filters.h"
#include "lmt/clean/normalize.h"

namespace lmt::clean {

struct MinHashStageOptions {
  bool enabled = true;
  int64_t ngram = 5;
  std::string unit = "word";  // "word" | "char"
  int64_t bands = 14, rows = 8;  // 0 and 0: chosen from threshold and num_hashes (choose_bands_rows)
  int64_t num_hashes = 112;      // used only when bands and rows are 0
  double threshold = 0.8;
  bool verify = false;
  int64_t seed = 1;
  int64_t memory_budget_mb = 256;
};

struct CleanOptions {
  std::string text_field = "text";
  NormalizeOptions normalize;
  GopherRepetitionOptions gopher_repetition;
  GopherQualityOptions gopher_quality;
  C4Options c4;
  FineWebOptions fineweb;
  bool exact_dedup = true;         // documents by the hash of their normalised text
  bool exact_dedup_lines = false;  // C4-style: drop lines seen in an earlier kept document
  int64_t exact_dedup_min_line_chars = 1;
  MinHashStageOptions minhash;
  int64_t decontaminate_ngram = 13;
  std::string decontaminate_action = "remove";  // "remove" | "report"
  int64_t shard_bytes = int64_t{256} << 20;     // a new output shard after this many bytes
  int64_t removed_samples_per_reason = 20;
  int64_t batch_docs = 512;                      // documents handed to the workers at a time
};

struct KeyDoc {
  std::string key, type, default_value, doc;
};
// Every key of clean.toml with its type, default and documentation, in file order.
std::vector<KeyDoc> clean_keys();

// Defaults overlaid with the TOML file at `path` ("" for the defaults).
StatusOr<CleanOptions> load_clean_options(const std::string& path);
// load_clean_options(path), then each "section.key=value" of `overrides` (lmtrain data clean --set)
// applied in order: the value is read as TOML (20, 0.8, true, ["a"]) or else as a string.
StatusOr<CleanOptions> load_clean_options(const std::string& path, const std::vector<std::string>& overrides);
StatusOr<CleanOptions> parse_clean_options(const std::string& toml_text, const std::string& source);

// A canonical text of every setting (the resume check compares it).
std::string options_fingerprint(const CleanOptions& o);

}  // namespace lmt::clean
