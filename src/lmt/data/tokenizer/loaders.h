// The tokenizer file formats lmtrain reads, each turned into a BpeTokenizer (bpe_tokenizer.h).
// load_tokenizer() (tokenizer.h) picks one by path; these are for callers that know the format.
//
// Every loader returns a Status naming the file (and line or JSON key) on a malformed or
// unsupported file; a tokenizer.json feature lmtrain does not implement is kUnimplemented naming
// the feature. Files are read whole at load time; nothing is kept open. Thread-safe (no shared state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmt/data/tokenizer/bpe_tokenizer.h"

namespace lmt::data {

// OpenAI's encodings: the pre-tokenisation pattern and special tokens that a .tiktoken rank file
// does not carry (the constants of tiktoken_ext/openai_public.py).
struct TiktokenEncoding {
  std::string_view name;  // "r50k_base", "p50k_base", "cl100k_base", "o200k_base"
  std::string_view pattern;
  std::vector<std::pair<std::string_view, int32_t>> special_tokens;
};
// nullptr for an unknown name.
const TiktokenEncoding* find_tiktoken_encoding(std::string_view name);
// "r50k_base, p50k_base, cl100k_base, o200k_base" (for hints).
std::string tiktoken_encoding_names();

// Reads a `<base64 bytes> <rank>` file (empty lines skipped). ranks[r] holds the bytes of rank r;
// ranks that the file skips are std::nullopt. Errors (kDataLoss) name the file and line.
StatusOr<std::vector<std::optional<std::string>>> read_tiktoken_ranks(const std::string& path);

// A tiktoken-style tokenizer from ranked byte strings (rank = id), a PCRE2 pattern and special
// tokens: the form a trained byte-level BPE can take too. `source` names it in messages.
StatusOr<std::unique_ptr<BpeTokenizer>> make_tiktoken_tokenizer(
    std::vector<std::optional<std::string>> ranks, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& special_tokens, const std::string& source,
    const std::string& description);

// A .tiktoken file with the pattern and specials of `encoding` (inferred from the file name,
// e.g. cl100k_base.tiktoken, when empty).
StatusOr<std::unique_ptr<BpeTokenizer>> load_tiktoken_file(const std::string& path, const std::string& encoding);

// A directory holding GPT-2's encoder.json and vocab.bpe (OpenAI's gpt-2 release layout).
StatusOr<std::unique_ptr<BpeTokenizer>> load_gpt2_directory(const std::string& dir);

// A Hugging Face tokenizer.json with a BPE model (byte-level, or SentencePiece-style with ▁ and
// byte fallback). Supported: normalizers NFC, Prepend, Replace (string), Sequence; pre-tokenizers
// ByteLevel, Split (Isolated), Metaspace (first), Sequence; decoders ByteLevel, Metaspace, Replace
// (string), ByteFallback, Fuse, Strip, Sequence; added_tokens. post_processor, truncation and
// padding do not change encode() (it adds no special tokens) and are ignored.
StatusOr<std::unique_ptr<BpeTokenizer>> load_hf_tokenizer_json(const std::string& path);
// The same from the file's bytes (fuzzing, tests); `source` names it in messages.
StatusOr<std::unique_ptr<BpeTokenizer>> parse_hf_tokenizer_json(std::string_view json, const std::string& source);

// Reads a whole file (kNotFound / kIoError naming it).
StatusOr<std::string> read_file_bytes(const std::string& path);

// The bound (exclusive) on the ids of a vocabulary file that defines `entries` tokens. Every id
// table is dense (one slot per id up to the largest), and real files number their tokens from 0
// with few gaps, so an id far beyond the count is corruption: without this bound one line such as
// "IQ== 999999999" would allocate gigabytes. The loaders refuse larger ids, naming them.
inline int64_t token_id_bound(size_t entries) {
  return std::min<int64_t>(int64_t{1} << 30, 2 * static_cast<int64_t>(entries) + 1024);
}

}  // namespace lmt::data
