#include "lmt/export/gguf_vocab.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "lmt/data/tokenizer/pretokenize.h"
#include "lmt/export/gguf_format.h"

namespace lmt::exporter::gguf {
namespace {

// A token id from tokenizer.json: an integer that fits int64, else nullopt (a float such as 4e301
// must not be converted: that is undefined behaviour).
std::optional<int64_t> token_id_value(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

int32_t t(TokenType x) { return static_cast<int32_t>(x); }

StatusOr<std::string> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open tokenizer " + path, "pass the model's tokenizer with --tokenizer");
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return IoError("cannot read tokenizer " + path);
  return ss.str();
}

// Pads `v` with "[PADn]" (unused) up to `vocab_size` tokens, or refuses more tokens than rows.
Status fit_to_model(GgufVocab* v, int64_t vocab_size, const std::string& path) {
  if (static_cast<int64_t>(v->tokens.size()) > vocab_size)
    return InvalidArgument(path + " has " + std::to_string(v->tokens.size()) + " tokens but the model only " +
                               std::to_string(vocab_size) + " embedding rows",
                           "export with the tokenizer the model was trained with");
  for (int64_t i = static_cast<int64_t>(v->tokens.size()); i < vocab_size; ++i) {
    v->tokens.push_back("[PAD" + std::to_string(i) + "]");
    v->types.push_back(t(TokenType::kUnused));
    if (!v->scores.empty()) v->scores.push_back(-1e9f);
  }
  return Status::Ok();
}

// The byte-level BPE of a tokenizer.json: which split regex (if any) runs before the ByteLevel step.
StatusOr<std::string> split_regex_of(const nlohmann::json& pre, const std::string& path) {
  auto bad = [&](const std::string& what) {
    return Unimplemented(
        path + ": pre_tokenizer " + what + " has no llama.cpp equivalent that lmtrain knows",
        "GGUF export supports a ByteLevel pre-tokenizer, alone (GPT-2's regex) or after one Split regex");
  };
  if (!pre.is_object()) return bad("null");
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") {
    if (pre.value("use_regex", true)) return std::string(data::gpt2_pattern());
    return bad("ByteLevel without a regex");
  }
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].size() == 2) {
    const nlohmann::json& split = pre["pretokenizers"][0];
    const nlohmann::json& byte_level = pre["pretokenizers"][1];
    if (split.value("type", "") == "Split" && byte_level.value("type", "") == "ByteLevel" &&
        !byte_level.value("use_regex", true) && split.contains("pattern") && split["pattern"].contains("Regex"))
      return split["pattern"]["Regex"].get<std::string>();
  }
  return bad("'" + pre.dump().substr(0, 120) + "'");
}

// bos/eos/pad from a tokenizer_config.json next to the tokenizer.json, when there is one.
std::optional<std::string> config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const nlohmann::json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

StatusOr<GgufVocab> tokenizer_json_vocab(const std::string& path, const std::string& text, int64_t vocab_size);

// A value of the wrong type anywhere in the file (nlohmann throws) is an error naming the file.
StatusOr<GgufVocab> load_tokenizer_json(const std::string& path, const std::string& text, int64_t vocab_size) {
  try {
    return tokenizer_json_vocab(path, text, vocab_size);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(path + ": not the tokenizer.json layout lmtrain expects (" + e.what() + ")",
                    "a Hugging Face tokenizer.json with model.vocab {token: id} and model.merges");
  }
}

StatusOr<GgufVocab> tokenizer_json_vocab(const std::string& path, const std::string& text, int64_t vocab_size) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return DataLoss(path + " is not valid JSON");
  if (!doc.contains("model") || doc["model"].value("type", "") != "BPE")
    return Unimplemented(path + ": only BPE tokenizer.json models can be exported to GGUF",
                         "model.type is '" + (doc.contains("model") ? doc["model"].value("type", "?") : "?") + "'");
  const nlohmann::json& model = doc["model"];
  if (!model.contains("vocab") || !model["vocab"].is_object() || !model.contains("merges") ||
      !model["merges"].is_array())
    return DataLoss(path + ": model.vocab is not an object or model.merges not an array",
                    "a Hugging Face tokenizer.json with model.vocab {token: id} and model.merges");
  if (model.value("byte_fallback", false))
    return Unimplemented(path + ": a byte_fallback (SentencePiece-style) BPE is not exported to GGUF yet",
                         "GGUF export supports byte-level BPE tokenizer.json files and llama2.c .bin tokenizers");
  LMT_ASSIGN_OR_RETURN(std::string regex, split_regex_of(doc["pre_tokenizer"], path));
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre_tokenizer_name(regex);
  if (v.pre.empty())
    return Unimplemented(path + ": its split regex matches none of llama.cpp's pre-tokenizers that lmtrain maps (" +
                             regex.substr(0, 80) + "...)",
                         "supported: the GPT-2, cl100k (Llama 3), o200k (GPT-4o) and Qwen2 regexes");
  auto too_many = [&](int64_t id) {
    return InvalidArgument(path + " has token id " + std::to_string(id) + " but the model only " +
                               std::to_string(vocab_size) + " embedding rows",
                           "export with the tokenizer the model was trained with");
  };
  // Tokens by id: the vocab, then the added tokens (which may also be in the vocab).
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const std::optional<int64_t> maybe_id = token_id_value(it.value());
    if (!maybe_id) return DataLoss(path + ": token '" + it.key() + "' has the id " + it.value().dump() + ", which is not an integer");
    const int64_t id = *maybe_id;
    if (id < 0) return DataLoss(path + ": token '" + it.key() + "' has the negative id " + std::to_string(id));
    if (id >= vocab_size) return too_many(id);
    by_id[id] = {it.key(), t(TokenType::kNormal)};
  }
  std::map<std::string, int32_t> added_ids;
  if (doc.contains("added_tokens") && doc["added_tokens"].is_array()) {
    for (const nlohmann::json& a : doc["added_tokens"]) {
      if (!a.is_object()) return DataLoss(path + ": an added_tokens entry is " + a.dump().substr(0, 80) + ", not an object");
      const std::optional<int64_t> maybe_id = a.contains("id") ? token_id_value(a["id"]) : std::nullopt;
      const int64_t id = maybe_id.value_or(-1);
      const std::string content = a.contains("content") && a["content"].is_string() ? a["content"].get<std::string>() : "";
      if (id < 0) return DataLoss(path + ": added token '" + content + "' has no integer id >= 0");
      if (id >= vocab_size) return too_many(id);
      by_id[id] = {content, (!a.contains("special") || !a["special"].is_boolean() || a["special"].get<bool>()) ? t(TokenType::kControl) : t(TokenType::kUserDefined)};
      added_ids[content] = static_cast<int32_t>(id);
    }
  }
  const int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;  // <= vocab_size
  for (int64_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens.push_back("[PAD" + std::to_string(i) + "]");
      v.types.push_back(t(TokenType::kUnused));
    } else {
      v.tokens.push_back(it->second.first);
      v.types.push_back(it->second.second);
    }
  }
  for (const nlohmann::json& m : model["merges"]) {
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2) {
      v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return DataLoss(path + ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  // Special ids: tokenizer_config.json when present, else the usual names.
  nlohmann::json cfg;
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (std::ifstream cf(dir + "/tokenizer_config.json"); cf) {
    cfg = nlohmann::json::parse(cf, nullptr, false);
    if (cfg.is_discarded()) cfg = nlohmann::json::object();
  }
  auto id_of = [&](const std::optional<std::string>& s) -> int32_t {
    if (!s) return -1;
    auto a = added_ids.find(*s);
    if (a != added_ids.end()) return a->second;
    auto m = model["vocab"].find(*s);
    return m != model["vocab"].end() ? m->get<int32_t>() : -1;
  };
  // The usual names count only as added (special) tokens: Qwen's vocabulary has a plain "<s>".
  auto added_id = [&](const char* name) {
    auto a = added_ids.find(name);
    return a != added_ids.end() ? a->second : -1;
  };
  v.eos = id_of(config_token(cfg, "eos_token"));
  for (const char* name : {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"})
    if (v.eos < 0) v.eos = added_id(name);
  v.bos = id_of(config_token(cfg, "bos_token"));
  for (const char* name : {"<|begin_of_text|>", "<s>", "<bos>"})
    if (v.bos < 0) v.bos = added_id(name);
  v.add_bos = v.bos >= 0 && cfg.value("add_bos_token", true) && v.bos != v.eos;
  // No beginning-of-text token (GPT-2, lmtrain's own tokenizers): sequences start after an
  // end-of-text, as GPT-2's bos_token = eos_token says.
  if (v.bos < 0) v.bos = v.eos;
  v.pad = id_of(config_token(cfg, "pad_token"));
  LMT_RETURN_IF_ERROR(fit_to_model(&v, vocab_size, path));
  return v;
}

StatusOr<GgufVocab> load_llama2c(const std::string& path, const std::string& b, int64_t vocab_size) {
  GgufVocab v;
  v.model = "llama";
  size_t pos = 4;  // max_token_length
  auto truncated = [&] {
    return DataLoss(
        path + " is truncated at byte " + std::to_string(pos) + " (token " + std::to_string(v.tokens.size()) + ")",
        "a llama2.c tokenizer is int32 max_token_length, then per token f32 score, int32 length, bytes");
  };
  if (b.size() < 4) return truncated();
  while (pos < b.size() && static_cast<int64_t>(v.tokens.size()) < vocab_size) {
    float score;
    int32_t len;
    if (pos + 8 > b.size()) return truncated();
    std::memcpy(&score, b.data() + pos, 4);
    std::memcpy(&len, b.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || pos + static_cast<size_t>(len) > b.size()) return truncated();
    std::string s = b.substr(pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    const int64_t id = static_cast<int64_t>(v.tokens.size());
    TokenType type = TokenType::kNormal;
    if (s == "\n<s>\n" || (id == 1 && s == "<s>")) {
      s = "<s>";
      type = TokenType::kControl;
    } else if (s == "\n</s>\n" || (id == 2 && s == "</s>")) {
      s = "</s>";
      type = TokenType::kControl;
    } else if (id == 0 && s == "<unk>") {
      type = TokenType::kUnknown;
    } else if (s.size() == 6 && s.rfind("<0x", 0) == 0 && s[5] == '>') {
      type = TokenType::kByte;
    } else {
      std::string r;  // llama2.c's export turned SentencePiece's "▁" into ' ': turn it back
      for (char c : s) r += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
      s = std::move(r);
    }
    v.tokens.push_back(std::move(s));
    v.scores.push_back(score);
    v.types.push_back(t(type));
  }
  if (pos != b.size())
    return InvalidArgument(path + " holds more than the model's " + std::to_string(vocab_size) + " tokens",
                           "export with the tokenizer the model was trained with");
  if (static_cast<int64_t>(v.tokens.size()) < vocab_size)  // llama2.c stores no count: the model's is it
    return DataLoss(path + " holds " + std::to_string(v.tokens.size()) + " tokens, the model " +
                        std::to_string(vocab_size) + " (is the file truncated?)",
                    "a llama2.c tokenizer has exactly one token per embedding row");
  if (v.tokens.size() < 3 || v.tokens[1] != "<s>" || v.tokens[2] != "</s>")
    return InvalidArgument(path + ": a llama2.c tokenizer has <unk>, <s>, </s> as ids 0, 1, 2",
                           "is this a llama2.c tokenizer file?");
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  return v;
}

// GPT-2's own files: encoder.json (token -> id, byte-to-unicode form) and vocab.bpe (a "#version"
// line, then one merge per line). <|endoftext|> is both bos and eos, as in GPT-2's HF config.
StatusOr<GgufVocab> gpt2_dir_vocab(const std::string& dir, int64_t vocab_size);

StatusOr<GgufVocab> load_gpt2_dir(const std::string& dir, int64_t vocab_size) {
  try {
    return gpt2_dir_vocab(dir, vocab_size);
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(dir + "/encoder.json: not GPT-2's {token: id} layout (" + e.what() + ")");
  }
}

StatusOr<GgufVocab> gpt2_dir_vocab(const std::string& dir, int64_t vocab_size) {
  LMT_ASSIGN_OR_RETURN(std::string enc_text, read_all(dir + "/encoder.json"));
  LMT_ASSIGN_OR_RETURN(std::string bpe_text, read_all(dir + "/vocab.bpe"));
  nlohmann::json enc = nlohmann::json::parse(enc_text, nullptr, false);
  if (enc.is_discarded() || !enc.is_object()) return DataLoss(dir + "/encoder.json is not a JSON object");
  std::map<int64_t, std::string> by_id;
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      return DataLoss(dir + "/encoder.json: the id of '" + it.key() + "' is not a non-negative integer");
    if (it.value().get<int64_t>() >= vocab_size)
      return InvalidArgument(dir + " has token id " + std::to_string(it.value().get<int64_t>()) +
                                 " but the model only " + std::to_string(vocab_size) + " embedding rows",
                             "export with the tokenizer the model was trained with");
    by_id[it.value().get<int64_t>()] = it.key();
  }
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  const int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;  // <= vocab_size
  for (int64_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    const bool special = it != by_id.end() && it->second == "<|endoftext|>";
    v.tokens.push_back(it != by_id.end() ? it->second : "[PAD" + std::to_string(i) + "]");
    v.types.push_back(t(it == by_id.end() ? TokenType::kUnused : special ? TokenType::kControl : TokenType::kNormal));
    if (special) v.bos = v.eos = static_cast<int32_t>(i);
  }
  std::istringstream lines(bpe_text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    v.merges.push_back(line);
  }
  LMT_RETURN_IF_ERROR(fit_to_model(&v, vocab_size, dir));
  return v;
}

}  // namespace

std::string pre_tokenizer_name(const std::string& split_regex) {
  if (split_regex == data::gpt2_pattern()) return "gpt-2";
  if (split_regex == data::cl100k_pattern()) return "llama-bpe";
  if (split_regex == data::o200k_pattern()) return "gpt-4o";
  if (split_regex == kQwen2Pattern) return "qwen2";
  return "";
}

StatusOr<GgufVocab> load_gguf_vocab(const std::string& path, int64_t vocab_size) {
  if (path.empty())
    return FailedPrecondition("the model has no known tokenizer, and a GGUF file must carry one",
                              "pass it with --tokenizer (tokenizer.json, or a llama2.c tokenizer .bin)");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path + "/tokenizer.json", ec))
      return load_gguf_vocab(path + "/tokenizer.json", vocab_size);
    if (std::filesystem::exists(path + "/encoder.json", ec)) return load_gpt2_dir(path, vocab_size);
    return NotFound(path + " has neither a tokenizer.json nor GPT-2's encoder.json + vocab.bpe",
                    "pass the tokenizer file itself with --tokenizer");
  }
  LMT_ASSIGN_OR_RETURN(std::string bytes, read_all(path));
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{') return load_tokenizer_json(path, bytes, vocab_size);
  if (path.size() >= 4 && path.substr(path.size() - 4) == ".bin") return load_llama2c(path, bytes, vocab_size);
  return Unimplemented(path + " is neither a tokenizer.json nor a llama2.c tokenizer .bin",
                       "GGUF export reads those two; convert other tokenizers to tokenizer.json first");
}

}  // namespace lmt::exporter::gguf
