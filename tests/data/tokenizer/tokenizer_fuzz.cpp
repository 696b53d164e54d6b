// libFuzzer target for the tokenizer.json loader and the encoder (clang only: -fsanitize=fuzzer,address).
//   CXX=clang++ cmake -S . -B build-clang -G Ninja -DLMT_BUILD_BENCH=OFF && ninja -C build-clang tokenizer_fuzz
//   build-clang/bin/tokenizer_fuzz -max_total_time=60 -max_len=8192 [corpus_dir]
// The first byte chooses the target: even -> the input is a tokenizer.json (it must load or give a
// Status; if it loads, encode/decode a fixed text); odd -> the rest is text encoded by two small
// built-in tokenizers (byte-level with NFC, SentencePiece-style with byte fallback), which must
// give valid ids and round-trip it where their formats promise to.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lmt/data/tokenizer/loaders.h"
#include "lmt/data/tokenizer/nfc.h"
#include "small_tokenizers.h"

namespace {

const lmt::data::BpeTokenizer& fixed(int which) {
  static auto byte_level = lmt::data::parse_hf_tokenizer_json(lmt::data::testing::small_byte_level_json().dump(), "bl");
  static auto sentencepiece = lmt::data::parse_hf_tokenizer_json(lmt::data::testing::small_sentencepiece_json().dump(), "sp");
  if (!byte_level.ok() || !sentencepiece.ok()) std::abort();
  return which == 0 ? **byte_level : **sentencepiece;
}

void check(const lmt::data::BpeTokenizer& t, const std::string& text, bool must_round_trip) {
  const auto ids = t.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) std::abort();
  if (must_round_trip && t.decode(ids) != text) std::abort();
  (void)t.encode_with_special_tokens(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto t = lmt::data::parse_hf_tokenizer_json(rest, "<fuzz>");
    if (t.ok()) check(**t, "the thing \xff hello", false);
    return 0;
  }
  // Byte-level: exact unless NFC changes the text. SentencePiece-style: exact unless the text holds
  // U+2581, which its decoder turns into a space.
  check(fixed(0), rest, lmt::data::nfc_normalize(rest) == rest);
  check(fixed(1), rest, rest.find("\xe2\x96\x81") == std::string::npos);
  return 0;
}
