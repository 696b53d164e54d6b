// BpeTokenizer: the one Tokenizer implementation behind every loader (GPT-2 files, tiktoken rank
// files, Hugging Face tokenizer.json). A loader translates its format into a BpeTokenizerSpec:
//
//   text ─► text steps (NFC, prepend, replace: whole text) ─► split steps (regex / before a char)
//        ─► BpeModel on each piece ─► ids
//   ids  ─► token texts ─► decode steps (HF decoders) ─► bytes
//
// A byte-level model stores its tokens as raw bytes (the loader undoes GPT-2's byte-to-character
// alphabet once), so encode works on bytes and decode is a concatenation.
//
// Ownership: owns everything it uses. Threading: immutable after create(); every method is safe to
// call from several threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmt/data/tokenizer/bpe.h"
#include "lmt/data/tokenizer/pretokenize.h"
#include "lmt/data/tokenizer/tokenizer.h"

namespace lmt::data {

struct TextStep {
  enum class Kind {
    kNfc,              // Unicode NFC
    kPrepend,          // `text` + input, when the input is not empty (HF Prepend)
    kPrependIfAbsent,  // `text` + input, when the input is not empty and does not start with `text`
    kReplace,          // every `from` -> `text`
  } kind;
  std::string text, from;
};

struct SplitStep {
  enum class Kind {
    kRegex,        // isolated regex pieces (gaps are pieces too): Split/ByteLevel/tiktoken
    kBeforeEach,   // a new piece starts at every occurrence of `text` (Metaspace split)
  } kind;
  std::optional<Pretokenizer> regex;
  std::string text;
};

struct DecodeStep {
  enum class Kind {
    kReplace,       // in every token: `from` -> `text`
    kByteFallback,  // runs of <0xXX> tokens -> their bytes (kept as bytes even if not valid UTF-8)
    kFuse,          // all tokens -> one
    kStrip,         // per token: up to `start` leading / `stop` trailing `text` characters removed
    kMetaspace,     // `from` (the replacement) -> ' '; in the first token removed when `prepend`
  } kind;
  std::string text, from;
  int start = 0, stop = 0;
  bool prepend = false;
};

struct AddedToken {
  std::string text;  // exact content (bytes)
  int32_t id = 0;
  bool special = true;
  bool lstrip = false, rstrip = false, single_word = false;
};

struct BpeTokenizerSpec {
  std::string source;       // file name, for messages
  std::string description;  // e.g. "tiktoken cl100k_base" (part of the fingerprint)
  std::vector<TextStep> text_steps;
  std::vector<SplitStep> split_steps;
  // model_tokens[id]: symbol text of each model id (raw bytes for byte-level; std::nullopt: no token)
  std::vector<std::optional<std::string>> model_tokens;
  std::vector<BpeMerge> merges;
  BpeOptions options;
  std::vector<DecodeStep> decode_steps;  // empty: decode concatenates token texts (byte-level)
  std::vector<AddedToken> added_tokens;  // specials and HF added tokens (decode to their text)
  std::vector<std::string> eos_candidates = {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"};
};

class BpeTokenizer final : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<BpeTokenizer>> create(BpeTokenizerSpec spec);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_id(std::string_view token) const override;
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::string fingerprint() const override { return fingerprint_; }

  // Like encode(), but occurrences of added/special token texts in `text` become their ids, as
  // Hugging Face `tokenizers` does for every added token and tiktoken's encode(allowed_special="all")
  // does for specials: leftmost match first, the longest at one position; lstrip/rstrip absorb the
  // adjacent whitespace; single_word matches only between non-word characters. Normalisation applies
  // to each stretch of text between matches. For chat templates and HF parity, not for training data.
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const;

  // The pieces encode() merges, after normalisation (for inspection and tests).
  std::vector<std::string> pieces(std::string_view text) const;
  const std::string& description() const { return description_; }

 private:
  BpeTokenizer(BpeModel model) : model_(std::move(model)) {}
  std::string normalize(std::string_view text) const;
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;
  void encode_into(std::string_view text, std::vector<int32_t>* out) const;

  BpeModel model_;
  std::string description_;
  std::vector<TextStep> text_steps_;
  std::vector<SplitStep> split_steps_;
  std::vector<DecodeStep> decode_steps_;
  std::vector<std::optional<std::string>> id_text_;  // decode table: model tokens + added tokens
  std::vector<AddedToken> added_;                    // longest text first
  BytesIdMap added_ids_;
  int64_t vocab_size_ = 0;
  std::optional<int32_t> eos_id_;
  std::string fingerprint_;
};

}  // namespace lmt::data
