// The tokenizer part of a GGUF file (tokenizer.ggml.*), read from the model's tokenizer:
//
//  * a Hugging Face tokenizer.json with a byte-level BPE model (lmtrain's trained tokenizers,
//    GPT-2, Qwen): model "gpt2"; tokens in the byte-to-unicode form tokenizer.json uses; merges as
//    "left right"; types normal, control (special added tokens), user-defined (other added tokens),
//    unused (the "[PADn]" fillers up to the model's vocabulary); `pre` names the llama.cpp
//    pre-tokenizer whose regex equals the file's split regex (see pre_tokenizer_name()).
//  * GPT-2's encoder.json + vocab.bpe (a directory holding them): the same, pre "gpt2",
//    <|endoftext|> control and both bos and eos. A directory with a tokenizer.json reads that file.
//  * a llama2.c tokenizer file (tok512.bin of stories260K): int32 max_token_length, then per token
//    f32 score, int32 length, bytes. Model "llama" (SentencePiece): spaces back to "▁", "\n<s>\n" /
//    "\n</s>\n" back to "<s>" / "</s>"; types: <unk> unknown, <s> </s> control, <0xXX> byte, the
//    rest normal; bos 1, eos 2, unk 0. It must hold exactly one token per embedding row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::exporter::gguf {

struct GgufVocab {
  std::string model;                               // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;                                 // tokenizer.ggml.pre ("" for "llama")
  std::vector<std::string> tokens;                 // exactly the model's vocabulary size
  std::vector<float> scores;                       // "llama" only
  std::vector<int32_t> types;                      // TokenType values
  std::vector<std::string> merges;                 // "gpt2" only
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;  // -1: not set
  bool add_bos = false;
};

// Reads `path` (tokenizer.json, a llama2.c .bin, or a directory with either tokenizer.json or
// GPT-2's files) for a model of `vocab_size` rows. Errors name the
// file and what is wrong: an unknown format, a non-byte-level model, a split regex llama.cpp has no
// pre-tokenizer for, more tokens than the model has rows.
StatusOr<GgufVocab> load_gguf_vocab(const std::string& path, int64_t vocab_size);

// The llama.cpp pre-tokenizer (tokenizer.ggml.pre) whose regex is `split_regex`: GPT-2's ->
// "gpt-2", cl100k's (= Llama 3's) -> "llama-bpe", o200k's -> "gpt-4o", Qwen2/3's -> "qwen2".
// "" when none matches.
std::string pre_tokenizer_name(const std::string& split_regex);

}  // namespace lmt::exporter::gguf
