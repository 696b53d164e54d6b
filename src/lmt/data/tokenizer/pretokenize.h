// Pretokenizer: splits text into the pieces that byte-pair merging then works on, with a PCRE2
// regular expression (UTF-8, Unicode properties, JIT), the way GPT-2, tiktoken and Hugging Face
// byte-level tokenizers do before BPE.
//
// Ownership: a Pretokenizer owns its compiled pattern (shared, read-only). Copies are cheap.
// Threading: immutable and thread-safe after create(); split() may run on many threads at once
// (each call uses a per-thread PCRE2 match-data block, never shared state).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::data {

class Pretokenizer {  // PCRE2 (UTF-8, UCP, JIT) regex pre-tokenisation; immutable and thread-safe after create()
 public:
  // Compiles `pcre2_pattern`. An invalid pattern gives InvalidArgument naming the offset and PCRE2's
  // reason.
  static StatusOr<Pretokenizer> create(const std::string& pcre2_pattern);

  // Appends to *pieces the consecutive pieces of `text` (views into text). The pieces concatenate to
  // exactly `text`; bytes the pattern does not match become pieces of their own (so nothing is lost),
  // and invalid UTF-8 is handled as bytes, never a crash.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;

  // The pattern this was created from.
  const std::string& pattern() const;

 private:
  struct Impl;  // the compiled code; defined in pretokenize.cpp
  explicit Pretokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The pre-tokenisation patterns of OpenAI's encodings, exactly as tiktoken defines them.
std::string_view gpt2_pattern();    // r50k/p50k/GPT-2
std::string_view cl100k_pattern();
std::string_view o200k_pattern();

}  // namespace lmt::data
