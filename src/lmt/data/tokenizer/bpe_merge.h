// learn_bpe_merges: the merge loop of byte-pair-encoding training, on counted pre-tokenised pieces.
//
// Input: distinct pieces (raw bytes) with how often each occurs in the corpus. Tokens start as the
// 256 single bytes (token id == byte value) and each step merges the adjacent pair with the highest
// count, weighted by piece frequency. Ties go to the lexicographically smallest (left bytes, right
// bytes), compared as unsigned bytes, so the result depends only on the multiset of pieces: not on
// their order, the thread count that counted them, or hash-table layout.
//
// Algorithm (the one of Hugging Face's BpeTrainer and Sennrich's reference): pair counts are kept
// incrementally; an index pair -> pieces that contain it limits each merge to the pieces it changes,
// and a max-heap with lazy invalidation picks the next pair (a popped entry whose count is out of date
// is re-queued with its current count). Cost per merge is proportional to the pieces it touches,
// never a recount of the corpus.
//
// Merges are applied to a piece left to right without overlap ("a a a" + (a,a) -> "aa a"), as BPE
// encoders apply them. A merge whose bytes equal an existing token's would reuse that token's id
// (Hugging Face's trainer does the same) rather than put one string in the vocabulary twice; with
// global left-to-right merging no case of it is known (randomised tests never produced one), so in
// practice merges.size() == tokens.size() - 256 and merge r makes id 256 + r.
//
// Threading: single-threaded; `progress` is called on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace lmt::data {

// One distinct pre-tokenised piece and its number of occurrences (count >= 1).
struct PieceCount {
  std::string bytes;
  int64_t count = 0;
};

struct LearnedMerge {
  int32_t left = 0;    // token ids
  int32_t right = 0;
  int32_t result = 0;  // id of the merged token (a new id, or an existing one with the same bytes)
  int64_t count = 0;   // weighted occurrences of the pair when it was merged
};

struct LearnedMerges {
  std::vector<std::string> tokens;  // id -> bytes; ids [0, 256) are the single bytes
  std::vector<LearnedMerge> merges;     // in rank order (first learned first)
};

// Learns merges until there are `max_tokens` distinct tokens (>= 256) or no adjacent pair is left.
// A piece listed twice acts as one piece with the summed count. `progress(tokens, max_tokens)` is
// called every few merges and once at the end.
LearnedMerges learn_bpe_merges(std::span<const PieceCount> pieces, int64_t max_tokens,
                           const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace lmt::data
