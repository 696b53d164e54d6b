// count_pieces: the counting pass of tokenizer training. Streams a corpus, cuts special tokens out
// of the text, pre-tokenises the rest and counts every distinct piece.
//
// Parallelism: the calling thread reads blocks (CorpusReader) into a bounded queue; `threads`
// workers pre-tokenise and count into their own hash maps, merged at the end. The result is a sum,
// sorted by bytes, so it is the same for any thread count. Memory: the distinct pieces (per worker
// until the merge) plus at most 2 * threads + 1 blocks of text.
//
// Special tokens: every occurrence of a special token's text in a document (leftmost first, the
// longest where several start at one place) is removed before pre-tokenisation and acts as a
// boundary, so no counted piece (and hence no merge) spans one.
//
// Threading: call from one thread; `progress(bytes_read, total_bytes)` runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/tokenizer/bpe_merge.h"
#include "lmt/data/tokenizer/corpus_reader.h"
#include "lmt/data/tokenizer/pretokenize.h"

namespace lmt::data {

struct PieceCountOptions {
  int threads = 1;                          // counting workers (>= 1)
  std::vector<std::string> special_tokens;  // non-empty strings
};

struct PieceCountStats {
  uint64_t bytes = 0;              // of input files read
  int64_t documents = 0;
  int64_t pieces = 0;              // pre-tokenised pieces, with repeats
  int64_t special_occurrences = 0;  // special-token texts found (and cut out) in the input
};

// Distinct pieces with their counts, sorted by bytes (unsigned). Errors come from the reader
// (files, JSONL lines); nothing is returned partially.
StatusOr<std::vector<PieceCount>> count_pieces(CorpusReader* reader, const Pretokenizer& pretokenizer,
                                               const PieceCountOptions& options,
                                               const std::function<void(uint64_t, uint64_t)>& progress,
                                               PieceCountStats* stats);

}  // namespace lmt::data
