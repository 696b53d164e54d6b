// Tokenizer: text <-> token ids. The contract every tokenizer in lmtrain meets (trained byte-level
// BPE, GPT-2 encoder.json/vocab.bpe, tiktoken rank files, Hugging Face tokenizer.json).
//
// encode() treats its input as ordinary text: special tokens written in the text (e.g. the string
// "<|endoftext|>") are encoded as plain text, never parsed (tiktoken's encode_ordinary). Any byte
// sequence is accepted, invalid UTF-8 included (byte-level models encode bytes; others fall back
// to bytes or an unknown token as their format says). decode(encode(x)) == x for byte-level models.
// Implementations are immutable after loading and safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Ids of `text` as ordinary text (no special-token parsing, no BOS/EOS added).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes of `ids` concatenated (special tokens decode to their text).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Id of a special or ordinary token given as its exact text, if the vocabulary has it.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  // The end-of-document token placed between documents in training data, if any
  // (<|endoftext|> for GPT-2/tiktoken/Qwen, </s> for SentencePiece-style models).
  virtual std::optional<int32_t> eos_id() const = 0;
  // A stable hex digest of everything that determines the encoding (for dataset manifests).
  virtual std::string fingerprint() const = 0;
};

// Opens a tokenizer by path:
//   a tokenizer.json (Hugging Face), a *.tiktoken rank file (its pattern and special tokens come
//   from `encoding`, e.g. "cl100k_base"; inferred from the file name when empty), or a directory
//   holding GPT-2's encoder.json + vocab.bpe.
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path, const std::string& encoding = "");

}  // namespace lmt::data
