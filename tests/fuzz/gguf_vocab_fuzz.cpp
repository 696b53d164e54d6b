// gguf_vocab_fuzz: the tokenizer readers of the GGUF export (export/gguf_vocab.h: load_gguf_vocab).
//
// Input: a selector byte, then the file. 0: a tokenizer.json; 1: a llama2.c tokenizer .bin; 2: a
// GPT-2 directory (encoder.json, a NUL byte, then vocab.bpe). It must load or give a Status. If it
// loads for a model of 64 rows, the vocabulary must be exactly 64 tokens with a type each (1 to 6),
// scores for "llama" only (64 of them), special ids in [-1, 64), a pre-tokenizer name for "gpt2".
// Seeds: one small valid file of each kind, built here.
//   build-fuzz/bin/gguf_vocab_fuzz -max_total_time=60 -max_len=8192 CORPUS_DIR
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "lmt/data/tokenizer/byte_level.h"
#include "lmt/data/tokenizer/pretokenize.h"
#include "lmt/export/gguf_vocab.h"

namespace {

constexpr int64_t kRows = 64;

void write_seeds(const std::string& dir) {
  using lmt::data::byte_level_encode;
  // tokenizer.json: 'a'..'z', two merges, <|endoftext|> (lmtrain's layout: o200k Split + ByteLevel).
  nlohmann::json vocab = nlohmann::json::object();
  for (int c = 'a'; c <= 'z'; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 'a';
  vocab["th"] = 26;
  vocab[byte_level_encode(" ") + "t"] = 27;
  nlohmann::json doc = {
      {"added_tokens", {{{"id", 28}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(lmt::data::o200k_pattern())}}}},
          {{"type", "ByteLevel"}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"t h", byte_level_encode(" ") + " t"}}}}};
  lmt::fuzz::write_file(dir + "/tokenizer_json", std::string(1, '\0') + doc.dump());
  // llama2.c: <unk>, <s>, </s>, then <0x00>.. and pieces up to 64 tokens.
  std::string bin(4, '\0');
  bin[0] = 8;
  auto add = [&](const std::string& s, float score) {
    const int32_t len = static_cast<int32_t>(s.size());
    bin.append(reinterpret_cast<const char*>(&score), 4);
    bin.append(reinterpret_cast<const char*>(&len), 4);
    bin += s;
  };
  add("<unk>", 0), add("\n<s>\n", 0), add("\n</s>\n", 0);
  for (int i = 3; i < kRows; ++i) {
    char b[8];
    std::snprintf(b, sizeof b, "<0x%02X>", i - 3);
    add(i < 40 ? std::string(b) : " t" + std::to_string(i), -static_cast<float>(i));
  }
  lmt::fuzz::write_file(dir + "/llama2c", std::string(1, '\1') + bin);
  // GPT-2 files.
  nlohmann::json enc = nlohmann::json::object();
  for (int c = 'a'; c <= 'z'; ++c) enc[std::string(1, static_cast<char>(c))] = c - 'a';
  enc["th"] = 26;
  enc["<|endoftext|>"] = 27;
  lmt::fuzz::write_file(dir + "/gpt2",
                        std::string(1, '\2') + enc.dump() + std::string(1, '\0') + "#version: 0.2\nt h\n");
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0] % 3;
  const std::string_view file = lmt::fuzz::as_view(data + 1, size - 1);
  std::string path;
  if (selector == 0) {
    path = lmt::fuzz::write_scratch("tokenizer.json", file);
  } else if (selector == 1) {
    path = lmt::fuzz::write_scratch("tok.bin", file);
  } else {
    const auto [encoder, merges] = lmt::fuzz::split_once(file, '\0');
    lmt::fuzz::write_scratch("gpt2/encoder.json", encoder);
    lmt::fuzz::write_scratch("gpt2/vocab.bpe", merges);
    path = lmt::fuzz::scratch_dir() + "/gpt2";
  }
  auto v = lmt::exporter::gguf::load_gguf_vocab(path, kRows);
  if (!v.ok()) return 0;
  if (static_cast<int64_t>(v->tokens.size()) != kRows || v->types.size() != v->tokens.size())
    lmt::fuzz::fail("vocabulary of " + std::to_string(v->tokens.size()) + " tokens for 64 rows");
  for (int32_t t : v->types)
    if (t < 1 || t > 6) lmt::fuzz::fail("token type " + std::to_string(t));
  if (v->model == "llama") {
    if (v->scores.size() != v->tokens.size()) lmt::fuzz::fail("llama vocabulary without one score per token");
  } else if (v->model == "gpt2") {
    if (v->pre.empty() || !v->scores.empty()) lmt::fuzz::fail("gpt2 vocabulary without pre or with scores");
  } else {
    lmt::fuzz::fail("model '" + v->model + "'");
  }
  for (int32_t id : {v->bos, v->eos, v->unk, v->pad})
    if (id < -1 || id >= kRows) lmt::fuzz::fail("special id " + std::to_string(id));
  return 0;
}
