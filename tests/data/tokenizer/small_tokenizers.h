// Small, valid tokenizer files built in code, for tests that must not depend on the shared data
// (malformed-file tests, the mutation test, the fuzz target's seed).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "lmt/data/tokenizer/byte_level.h"

namespace lmt::data::testing {

// A byte-level BPE tokenizer.json (GPT-2 style): 256 byte tokens, merges for "th", "the", " the",
// "in", "ing", and an added <|endoftext|>.
inline nlohmann::json small_byte_level_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  const char* merges[][2] = {{"t", "h"}, {"th", "e"}, {"Ġ", "the"}, {"i", "n"}, {"in", "g"}, {"Ġ", "t"}};
  nlohmann::json m = nlohmann::json::array();
  int id = 256;
  for (auto& g : merges) {
    const std::string merged = std::string(g[0]) + g[1];
    if (!vocab.contains(merged)) vocab[merged] = id++;
    m.push_back(std::string(g[0]) + " " + g[1]);
  }
  return {
      {"version", "1.0"},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "'s|'t| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}}},
           {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {{{"id", id}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
  };
}

// A SentencePiece-style BPE tokenizer.json (Mistral/Llama style): ▁ metaspace, byte fallback.
inline nlohmann::json small_sentencepiece_json() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  int id = 3;
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = id++;
  for (const char* s : {"\u2581", "a", "b", "c", "h", "e", "l", "o", "\u2581h", "el", "lo", "\u2581hel", "\u2581hello"})
    if (!vocab.contains(s)) vocab[s] = id++;
  return {
      {"version", "1.0"},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\u2581"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
        {"merges", {"\u2581 h", "e l", "l o", "\u2581h el", "\u2581hel lo"}}}},
  };
}

}  // namespace lmt::data::testing
