// gpt2_files_fuzz: the GPT-2 encoder.json + vocab.bpe loader (data/tokenizer/loaders.h:
// load_gpt2_directory).
//
// Input: encoder.json, a NUL byte, then vocab.bpe (no NUL: vocab.bpe is empty). Both are written
// to a scratch directory, which is loaded. It must load or give a Status. If it loads, a fixed text
// must encode to ids below vocab_size and decode back exactly.
// Seeds: a vocabulary of the 256 byte-level characters, a few merges and <|endoftext|>, built here
// (the shared encoder.json is 1 MB: too large to mutate usefully).
//   build-fuzz/bin/gpt2_files_fuzz -max_total_time=60 -max_len=16384 CORPUS_DIR
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "lmt/data/tokenizer/byte_level.h"
#include "lmt/data/tokenizer/loaders.h"

namespace {

void write_seeds(const std::string& dir) {
  using lmt::data::byte_level_encode;
  nlohmann::json enc = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) enc[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  std::string bpe = "#version: 0.2\n";
  int id = 256;
  for (const auto& [a, b] : {std::pair{"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"}, {"in", "g"}, {" ", "t"}}) {
    const std::string left = byte_level_encode(a), right = byte_level_encode(b);
    if (!enc.contains(left + right)) enc[left + right] = id++;
    bpe += left + " " + right + "\n";
  }
  enc["<|endoftext|>"] = id;
  lmt::fuzz::write_file(dir + "/small", enc.dump() + std::string(1, '\0') + bpe);
  lmt::fuzz::write_file(dir + "/crlf_no_version", enc.dump(1) + std::string(1, '\0') + "\xc4\xa0 t\r\nt h\r\n");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [encoder, merges] = lmt::fuzz::split_once(lmt::fuzz::as_view(data, size), '\0');
  lmt::fuzz::write_scratch("gpt2/encoder.json", encoder);
  lmt::fuzz::write_scratch("gpt2/vocab.bpe", merges);
  auto t = lmt::data::load_gpt2_directory(lmt::fuzz::scratch_dir() + "/gpt2");
  if (!t.ok()) return 0;
  using namespace std::string_literals;
  const std::string text = "the thing in caf\xc3\xa9 \xe4\xb8\xad \xff\xfe\x00 12345  \n<|endoftext|>"s;
  const std::vector<int32_t> ids = (*t)->encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= (*t)->vocab_size()) lmt::fuzz::fail("id " + std::to_string(id) + " out of range");
  if ((*t)->decode(ids) != text) lmt::fuzz::fail("decode(encode(text)) != text");
  (void)(*t)->encode_with_special_tokens(text);
  return 0;
}
