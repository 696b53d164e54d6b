// BpeModel: byte-pair encoding of one pre-tokenised piece into token ids.
//
// The algorithm is the one tiktoken and Hugging Face `tokenizers` share: start from the piece's
// symbols (its bytes, or its UTF-8 characters for SentencePiece-style models), then repeatedly merge
// the adjacent pair with the lowest merge rank, the leftmost one on ties, until no pair has a merge.
// Short pieces use a linear scan over a small array (tiktoken's byte_pair_merge); long ones a heap
// over a linked list (HF's Word::merge_all), so a megabyte-long piece costs O(n log n), not O(n²).
//
// A piece that is itself a token whose merges rebuild it (checked for every token at build time;
// tiktoken defines all of them so) is looked up whole: for ordinary text that is most pieces.
// A long kUtf8Chars piece (SentencePiece-style files have no pre-tokenizer: the whole text is one
// piece) is cut where no merge can reach across: between two known characters whose two-character
// string occurs in no token. Each side then merges on its own with the same result.
//
// Ownership: owns its tables. Threading: immutable after create(); encode_piece() is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/tokenizer/token_maps.h"

namespace lmt::data {

struct BpeMerge {
  int32_t left = 0, right = 0;  // ids of the adjacent pair
  int32_t rank = 0;             // lower merges first
  int32_t merged = 0;           // id of the result
};

struct BpeOptions {
  // kBytes: a piece starts as its bytes, each the token of that single byte (byte-level models;
  //   every byte must be a token). kUtf8Chars: a piece starts as its UTF-8 characters (invalid bytes
  //   count as one-byte characters); a character that is not a token falls back to <0xXX> byte
  //   tokens (byte_fallback) or to the unknown token.
  enum class Symbols { kBytes, kUtf8Chars } symbols = Symbols::kBytes;
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;  // consecutive unknown characters become one unknown token
  // Every token is looked up whole before merging (tiktoken's definition; HF "ignore_merges").
  // When false, only tokens whose own merges rebuild them are.
  bool whole_piece_lookup = false;
};

class BpeModel {
 public:
  // tokens[id]: the symbol text of each id (bytes for kBytes, UTF-8 for kUtf8Chars); ids without a
  // token are std::nullopt. Errors (InvalidArgument, naming `source`): a merge whose ids are out of
  // range, a kBytes vocabulary missing a single-byte token, a kUtf8Chars vocabulary that can neither
  // fall back to bytes nor to an unknown token.
  static StatusOr<BpeModel> create(const std::vector<std::optional<std::string>>& tokens,
                                   const std::vector<BpeMerge>& merges, const BpeOptions& options,
                                   const std::string& source);

  // Appends the ids of `piece` to *out.
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;

  int32_t token_id(std::string_view symbol_text) const { return token_ids_.find(symbol_text); }
  const BpeOptions& options() const { return options_; }

 private:
  BpeModel() = default;
  void encode_unit(std::string_view piece, std::vector<int32_t>* out) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>* symbols) const;
  // Merges `symbols` in place (leftmost lowest rank first) and appends the result to *out.
  void merge_small(int32_t* ids, size_t n, std::vector<int32_t>* out) const;
  void merge_large(const int32_t* ids, size_t n, std::vector<int32_t>* out) const;

  BpeOptions options_;
  BytesIdMap token_ids_;   // symbol text -> id, for symbols and whole-piece lookups
  BytesIdMap whole_ids_;   // pieces that may be looked up whole -> id
  PairMergeMap merges_;
  BytesIdMap junctions_;   // kUtf8Chars: every two-character string inside some token
  int32_t byte_ids_[256] = {};  // kBytes: id of each byte; kUtf8Chars: id of <0xXX> or -1
};

}  // namespace lmt::data
