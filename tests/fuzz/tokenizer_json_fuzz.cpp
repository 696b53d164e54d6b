// tokenizer_json_fuzz: the Hugging Face tokenizer.json loader and the BPE encoder
// (data/tokenizer/loaders.h: parse_hf_tokenizer_json).
//
// Input: the first byte chooses. Even: the rest is a tokenizer.json; it must load or give a Status,
// and if it loads, a fixed text is encoded and decoded. Odd: the rest is text encoded by two small
// built-in tokenizers (byte-level with NFC, SentencePiece-style with byte fallback), which must give
// valid ids and round-trip it where their formats promise to.
// Seeds: the two built-in tokenizer.json files (tests/data/tokenizer/small_tokenizers.h) and texts.
// The shared Qwen3/Mistral tokenizer.json files (1.8 and 11 MB) are too large to mutate usefully.
//   build-fuzz/bin/tokenizer_json_fuzz -max_total_time=60 -max_len=8192 CORPUS_DIR
#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/tokenizer/small_tokenizers.h"
#include "fuzz_util.h"
#include "lmt/data/tokenizer/loaders.h"
#include "lmt/data/tokenizer/nfc.h"

namespace {

const lmt::data::BpeTokenizer& fixed(int which) {
  static auto byte_level = lmt::data::parse_hf_tokenizer_json(lmt::data::testing::small_byte_level_json().dump(), "bl");
  static auto sentencepiece = lmt::data::parse_hf_tokenizer_json(lmt::data::testing::small_sentencepiece_json().dump(), "sp");
  if (!byte_level.ok() || !sentencepiece.ok()) lmt::fuzz::fail("a built-in tokenizer does not load");
  return which == 0 ? **byte_level : **sentencepiece;
}

void check(const lmt::data::BpeTokenizer& t, const std::string& text, bool must_round_trip) {
  const auto ids = t.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) lmt::fuzz::fail("id " + std::to_string(id) + " out of range");
  if (must_round_trip && t.decode(ids) != text) lmt::fuzz::fail("decode(encode(text)) != text");
  (void)t.encode_with_special_tokens(text);
}

void write_seeds(const std::string& dir) {
  using lmt::data::testing::small_byte_level_json;
  using lmt::data::testing::small_sentencepiece_json;
  lmt::fuzz::write_file(dir + "/byte_level.json", std::string(1, '\0') + small_byte_level_json().dump(1));
  lmt::fuzz::write_file(dir + "/sentencepiece.json", std::string(1, '\0') + small_sentencepiece_json().dump(1));
  lmt::fuzz::write_file(dir + "/text_ascii", "\x01the thing in the string, hello <|endoftext|> world\n");
  lmt::fuzz::write_file(dir + "/text_unicode", "\x01" "caf\xc3\xa9 e\xcc\x81 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\xe2\x80\x8d \xe2\x96\x81x");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

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
