// tiktoken_fuzz: the .tiktoken rank-file loader (data/tokenizer/loaders.h: load_tiktoken_file).
//
// Input: the first byte picks the encoding whose pattern and special tokens go with the file
// (r50k_base, p50k_base, cl100k_base, o200k_base); the rest is the file ('<base64> <rank>' lines),
// written to a scratch file. It must load or give a Status. If it loads, a fixed text (ASCII, UTF-8,
// invalid UTF-8, a special token's text) must encode to ids below vocab_size and decode back exactly
// (byte-level BPE is lossless).
// Seeds: a rank file of the 256 bytes plus a few merges, built here; the runner adds the first
// lines of the shared r50k/cl100k files.
//   build-fuzz/bin/tiktoken_fuzz -max_total_time=60 -max_len=8192 CORPUS_DIR
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "lmt/data/tokenizer/loaders.h"

namespace {

const char* kEncodings[] = {"r50k_base", "p50k_base", "cl100k_base", "o200k_base"};

std::string base64(std::string_view in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < in.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? k[v & 63] : '=';
  }
  return out;
}

void write_seeds(const std::string& dir) {
  std::string file;
  int rank = 0;
  for (int b = 0; b < 256; ++b) file += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
  for (const char* merged : {" t", "he", " the", "in", "ing", "\xc3\xa9"})
    file += base64(merged) + " " + std::to_string(rank++) + "\n";
  for (int e = 0; e < 4; ++e) lmt::fuzz::write_file(dir + "/" + kEncodings[e], std::string(1, static_cast<char>(e)) + file);
  lmt::fuzz::write_file(dir + "/skipped_ranks_crlf", "\x02" + base64("a") + " 3\r\n\r\n" + base64("b") + " 0\r\n");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path = lmt::fuzz::write_scratch("ranks.tiktoken", lmt::fuzz::as_view(data + 1, size - 1));
  auto t = lmt::data::load_tiktoken_file(path, kEncodings[data[0] % 4]);
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
