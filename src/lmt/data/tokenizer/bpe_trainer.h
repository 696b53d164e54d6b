// Byte-level BPE training in the GPT-2 family, with output in Hugging Face's tokenizer.json format.
//
// Pipeline: CorpusReader streams the inputs in bounded blocks -> count_pieces cuts out special
// tokens, pre-tokenises with a PCRE2 pattern and counts distinct pieces on `threads` workers ->
// learn_bpe_merges merges the most frequent adjacent pair (ties: smallest (left bytes, right bytes))
// with incremental pair counts until the vocabulary is full.
//
// Vocabulary layout (ids): 0..255 are the single bytes, id == byte value (as tiktoken, minbpe and
// nanochat; GPT-2's own files order them by their byte-level characters instead); then the merged
// tokens in the order they were learned (so id order is rank order); then the special tokens, in
// the order given, as GPT-2 (50256 = <|endoftext|>) and tiktoken do. `vocab_size` counts all three.
// If the corpus runs out of pairs first, the vocabulary is smaller and the specials follow the
// last merge (ids stay contiguous); TrainedBpe::vocab_size() says what was reached.
//
// Default pattern: o200k's (GPT-4o). Against cl100k's it keeps combining marks with their letters
// (Indic and other scripts are not cut between a consonant and its vowel sign), splits
// CamelCase words at case changes, and attaches contractions to the word; both are exact under the
// streaming cuts of CorpusReader. The pattern is stored in the output's pre_tokenizer.
//
// Determinism: the output depends only on the input bytes and the options other than `threads`
// and `block_bytes`; the same inputs give the same tokenizer.json bytes on any thread count.
// Threading: train_bpe uses `threads` counting workers internally; call it from one thread.
// `progress` runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/tokenizer/bpe_merge.h"

namespace lmt::data {

struct BpeTrainerOptions {
  std::vector<std::string> inputs;  // files and directories (see corpus_reader.h)
  std::string text_field = "text";  // of JSONL inputs
  int64_t vocab_size = 32000;       // 256 bytes + merged tokens + special tokens
  std::vector<std::string> special_tokens = {"<|endoftext|>"};  // non-empty, distinct, UTF-8
  std::string pattern;              // PCRE2 pre-tokenisation regex; empty: o200k_pattern()
  int threads = 0;                  // counting workers; 0: one per hardware thread
  size_t block_bytes = size_t{1} << 20;  // text per unit of counting work
};

struct BpeTrainProgress {
  enum class Phase { kCounting, kMerging };
  Phase phase = Phase::kCounting;
  uint64_t done = 0;   // counting: input bytes read; merging: tokens in the vocabulary so far
  uint64_t total = 0;  // counting: input bytes; merging: the target number of tokens
};

struct BpeTrainStats {
  uint64_t bytes = 0;  // of input files
  int64_t documents = 0;
  int64_t pieces = 0;  // pre-tokenised pieces, with repeats
  int64_t distinct_pieces = 0;
  int64_t special_occurrences = 0;  // special-token texts met (and cut out) in the input
  double count_seconds = 0;
  double merge_seconds = 0;
};

struct TrainedBpe {
  std::vector<std::string> tokens;          // id -> bytes: 256 single bytes, then merged tokens
  std::vector<LearnedMerge> merges;             // rank order
  std::vector<std::string> special_tokens;  // id of special_tokens[i] is tokens.size() + i
  std::string pattern;                      // the pre-tokenisation regex used
  BpeTrainStats stats;

  int64_t vocab_size() const { return static_cast<int64_t>(tokens.size() + special_tokens.size()); }
};

// Trains on options.inputs. Errors: bad options (vocab_size below 256 + specials, empty, duplicate
// or non-UTF-8 special tokens, a pattern that does not compile) and input errors from the reader,
// each naming the flag, file or line and how to fix it.
StatusOr<TrainedBpe> train_bpe(const BpeTrainerOptions& options,
                               const std::function<void(const BpeTrainProgress&)>& progress = {});

// The tokenizer as Hugging Face tokenizer.json text (version 1.0, BPE model, byte-level
// pre-tokenizer/decoder, merges as "left right" strings, specials in added_tokens and in the vocab).
std::string bpe_tokenizer_json(const TrainedBpe& bpe);

}  // namespace lmt::data
