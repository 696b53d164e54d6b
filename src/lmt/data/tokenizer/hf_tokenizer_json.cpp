// Hugging Face tokenizer.json -> BpeTokenizerSpec. Each supported component maps onto a step of the
// BpeTokenizer pipeline; anything else is refused by name (kUnimplemented), never approximated.
// nlohmann::json throws on type mismatches; those exceptions stay inside this file and become a
// kDataLoss Status naming the file.
#include <cctype>

#include <nlohmann/json.hpp>

#include "lmt/data/tokenizer/byte_level.h"
#include "lmt/data/tokenizer/loaders.h"

namespace lmt::data {
namespace {

using Json = nlohmann::json;

// Sequences nest; real files use one or two levels. The bound keeps a hostile file from
// recursing the parser off the stack.
constexpr int kMaxSequenceDepth = 16;

struct Parser {
  std::string source;
  BpeTokenizerSpec spec;
  bool byte_level = false;  // a ByteLevel pre-tokenizer: the vocabulary is byte-level text
  int depth = 0;            // of nested Sequence components

  Status too_deep(const std::string& what) const {
    return DataLoss(source + ": " + what + " Sequences nested more than " + std::to_string(kMaxSequenceDepth) + " deep");
  }

  Status unimplemented(const std::string& what) const {
    return Unimplemented(source + ": " + what + " is not supported by lmtrain",
                         "supported: BPE models; normalizers NFC, Prepend, Replace(String), Sequence; pre-tokenizers "
                         "ByteLevel, Split(Isolated), Metaspace, Sequence; decoders ByteLevel, Metaspace, Replace(String), "
                         "ByteFallback, Fuse, Strip, Sequence (see docs/TOKENIZERS.md)");
  }
  static std::string type_of(const Json& j) { return j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }
  // The literal of a {"String": s} pattern, or an error naming `where` for {"Regex": ...}.
  StatusOr<std::string> string_pattern(const Json& pattern, const std::string& where) const {
    if (pattern.contains("String")) return pattern["String"].get<std::string>();
    if (pattern.contains("Regex")) return unimplemented(where + " with a Regex pattern");
    return DataLoss(source + ": " + where + " has no pattern");
  }

  Status normalizer(const Json& n) {
    if (n.is_null()) return Status::Ok();
    const std::string type = type_of(n);
    if (type == "Sequence") {
      if (++depth > kMaxSequenceDepth) return too_deep("normalizer");
      for (const Json& s : n.at("normalizers")) LMT_RETURN_IF_ERROR(normalizer(s));
      --depth;
    } else if (type == "NFC") {
      spec.text_steps.push_back({TextStep::Kind::kNfc, "", ""});
    } else if (type == "Prepend") {
      spec.text_steps.push_back({TextStep::Kind::kPrepend, n.at("prepend").get<std::string>(), ""});
    } else if (type == "Replace") {
      LMT_ASSIGN_OR_RETURN(std::string from, string_pattern(n.at("pattern"), "normalizer Replace"));
      if (from.empty()) return DataLoss(source + ": normalizer Replace has an empty pattern");
      spec.text_steps.push_back({TextStep::Kind::kReplace, n.at("content").get<std::string>(), from});
    } else {
      return unimplemented("normalizer '" + type + "'");
    }
    return Status::Ok();
  }

  // Whole-text steps (prefix space, Metaspace) are only exact before any split.
  Status pre_tokenizer(const Json& p) {
    if (p.is_null()) return Status::Ok();
    const std::string type = type_of(p);
    if (type == "Sequence") {
      if (++depth > kMaxSequenceDepth) return too_deep("pre-tokenizer");
      for (const Json& s : p.at("pretokenizers")) LMT_RETURN_IF_ERROR(pre_tokenizer(s));
      --depth;
    } else if (type == "ByteLevel") {
      byte_level = true;
      if (p.value("add_prefix_space", false)) {
        if (!spec.split_steps.empty()) return unimplemented("ByteLevel add_prefix_space after a split");
        spec.text_steps.push_back({TextStep::Kind::kPrependIfAbsent, " ", ""});
      }
      if (p.value("use_regex", true)) {
        LMT_ASSIGN_OR_RETURN(Pretokenizer r, Pretokenizer::create(std::string(gpt2_pattern())));
        spec.split_steps.push_back({SplitStep::Kind::kRegex, std::move(r), ""});
      }
    } else if (type == "Split") {
      const std::string behavior = p.value("behavior", "Isolated");
      // With Isolated, matches and gaps are all pieces, so `invert` changes nothing.
      if (behavior != "Isolated") return unimplemented("pre-tokenizer Split with behavior '" + behavior + "'");
      const Json& pattern = p.at("pattern");
      std::string regex;
      if (pattern.contains("Regex")) {
        regex = pattern["Regex"].get<std::string>();
      } else if (pattern.contains("String")) {
        for (char c : pattern["String"].get<std::string>()) {  // a literal: escape every ASCII non-alphanumeric
          if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) regex += '\\';
          regex += c;
        }
      } else {
        return DataLoss(source + ": pre-tokenizer Split has no pattern");
      }
      auto r = Pretokenizer::create(regex);
      if (!r.ok()) return r.status().WithContext(source + ": pre-tokenizer Split: ");
      spec.split_steps.push_back({SplitStep::Kind::kRegex, std::move(*r), ""});
    } else if (type == "Metaspace") {
      if (!spec.split_steps.empty()) return unimplemented("pre-tokenizer Metaspace after a split");
      const std::string rep = p.value("replacement", "\u2581");
      std::string scheme = p.value("prepend_scheme", "");
      if (scheme.empty()) scheme = p.value("add_prefix_space", true) ? "always" : "never";
      if (scheme != "always" && scheme != "first" && scheme != "never")
        return unimplemented("Metaspace prepend_scheme '" + scheme + "'");
      spec.text_steps.push_back({TextStep::Kind::kReplace, rep, " "});
      if (scheme != "never") spec.text_steps.push_back({TextStep::Kind::kPrependIfAbsent, rep, ""});
      if (p.value("split", true)) spec.split_steps.push_back({SplitStep::Kind::kBeforeEach, std::nullopt, rep});
    } else {
      return unimplemented("pre-tokenizer '" + type + "'");
    }
    return Status::Ok();
  }

  Status decoder(const Json& d) {
    const std::string type = d.is_null() ? "null" : type_of(d);
    if (byte_level) {  // tokens are already bytes: ByteLevel decoding is the identity
      if (type == "ByteLevel") return Status::Ok();
      if (type == "Sequence" && d.at("decoders").size() == 1) {
        if (++depth > kMaxSequenceDepth) return too_deep("decoder");
        return decoder(d["decoders"][0]);
      }
      return unimplemented("decoder '" + type + "' with a ByteLevel pre-tokenizer");
    }
    if (type == "Sequence") {
      if (++depth > kMaxSequenceDepth) return too_deep("decoder");
      for (const Json& s : d.at("decoders")) LMT_RETURN_IF_ERROR(decoder(s));
      --depth;
    } else if (type == "Replace") {
      LMT_ASSIGN_OR_RETURN(std::string from, string_pattern(d.at("pattern"), "decoder Replace"));
      spec.decode_steps.push_back({DecodeStep::Kind::kReplace, d.at("content").get<std::string>(), from});
    } else if (type == "ByteFallback") {
      spec.decode_steps.push_back({DecodeStep::Kind::kByteFallback, "", ""});
    } else if (type == "Fuse") {
      spec.decode_steps.push_back({DecodeStep::Kind::kFuse, "", ""});
    } else if (type == "Strip") {
      DecodeStep s{DecodeStep::Kind::kStrip, d.at("content").get<std::string>(), ""};
      s.start = d.value("start", 0);
      s.stop = d.value("stop", 0);
      spec.decode_steps.push_back(s);
    } else if (type == "Metaspace") {
      DecodeStep s{DecodeStep::Kind::kMetaspace, "", d.value("replacement", "\u2581")};
      std::string scheme = d.value("prepend_scheme", "");
      s.prepend = scheme.empty() ? d.value("add_prefix_space", true) : scheme != "never";
      spec.decode_steps.push_back(s);
    } else if (type == "null") {
      return unimplemented("a missing decoder (HF joins tokens with spaces) on a non-byte-level model");
    } else {
      return unimplemented("decoder '" + type + "'");
    }
    return Status::Ok();
  }

  Status model(const Json& m) {
    std::string type = type_of(m);
    if (type.empty() && m.contains("merges")) type = "BPE";  // old files leave the BPE type out
    if (type != "BPE") return unimplemented("model type '" + (type.empty() ? std::string("(none)") : type) + "'");
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
      return unimplemented("BPE dropout");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && !m[key].get<std::string>().empty())
        return unimplemented(std::string("BPE ") + key);
    if (!m.contains("vocab") || !m["vocab"].is_object()) return DataLoss(source + ": model.vocab is missing or not an object");
    if (!m.contains("merges") || !m["merges"].is_array()) return DataLoss(source + ": model.merges is missing or not a list");

    BytesIdMap text_ids;
    std::string bytes;
    const int64_t bound = token_id_bound(m["vocab"].size());
    for (const auto& [text, value] : m["vocab"].items()) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= bound)
        return DataLoss(source + ": model.vocab['" + text + "'] is not an id in [0, " + std::to_string(bound) + ")",
                        "ids number the " + std::to_string(m["vocab"].size()) + " tokens of model.vocab from 0 without large gaps");
      const auto id = static_cast<int32_t>(value.get<int64_t>());
      if (static_cast<size_t>(id) >= spec.model_tokens.size()) spec.model_tokens.resize(id + 1);
      if (spec.model_tokens[id]) return DataLoss(source + ": model.vocab uses id " + std::to_string(id) + " twice");
      // Byte-level text becomes raw bytes; text outside the alphabet (rare) stays as its UTF-8.
      spec.model_tokens[id] = byte_level && byte_level_decode(text, &bytes) ? bytes : text;
      text_ids.insert(text, id);
    }
    const Json& merges = m["merges"];
    spec.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      std::string a, b;
      const Json& g = merges[i];
      if (g.is_string()) {  // "a b"
        const std::string s = g.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          return DataLoss(source + ": model.merges[" + std::to_string(i) + "] '" + s + "' is not two tokens separated by a space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (g.is_array() && g.size() == 2 && g[0].is_string() && g[1].is_string()) {  // ["a", "b"]
        a = g[0].get<std::string>();
        b = g[1].get<std::string>();
      } else {
        return DataLoss(source + ": model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [\"a\", \"b\"]");
      }
      const int32_t left = text_ids.find(a), right = text_ids.find(b), merged = text_ids.find(a + b);
      if (left < 0 || right < 0 || merged < 0)
        return DataLoss(source + ": model.merges[" + std::to_string(i) + "] ('" + a + "', '" + b +
                        "') uses or makes a token missing from model.vocab");
      spec.merges.push_back({left, right, static_cast<int32_t>(i), merged});
    }
    BpeOptions& o = spec.options;
    o.symbols = byte_level ? BpeOptions::Symbols::kBytes : BpeOptions::Symbols::kUtf8Chars;
    o.byte_fallback = m.value("byte_fallback", false);
    o.fuse_unk = m.value("fuse_unk", false);
    o.whole_piece_lookup = m.value("ignore_merges", false);
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      const std::string unk = m["unk_token"].get<std::string>();
      const int32_t id = text_ids.find(unk);
      if (id < 0) return DataLoss(source + ": model.unk_token '" + unk + "' is not in model.vocab");
      o.unk_id = id;
    }
    return Status::Ok();
  }

  Status added_tokens(const Json& list) {
    if (list.is_null()) return Status::Ok();
    for (const Json& a : list) {
      AddedToken t;
      t.text = a.at("content").get<std::string>();
      const int64_t id = a.at("id").get<int64_t>();
      const int64_t bound = token_id_bound(spec.model_tokens.size() + list.size());
      if (id < 0 || id >= bound)
        return DataLoss(source + ": added token '" + t.text + "' has id " + std::to_string(id) + ", outside [0, " +
                            std::to_string(bound) + ")",
                        "added tokens take the ids after model.vocab's, without large gaps");
      t.id = static_cast<int32_t>(id);
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      spec.added_tokens.push_back(std::move(t));
    }
    return Status::Ok();
  }

  Status parse(const Json& root) {
    if (!root.is_object()) return DataLoss(source + ": the top level is not a JSON object");
    if (!root.contains("model") || !root["model"].is_object())
      return DataLoss(source + ": no \"model\" object", "is this a Hugging Face tokenizer.json?");
    LMT_RETURN_IF_ERROR(normalizer(root.value("normalizer", Json())));
    LMT_RETURN_IF_ERROR(pre_tokenizer(root.value("pre_tokenizer", Json())));
    LMT_RETURN_IF_ERROR(model(root["model"]));
    LMT_RETURN_IF_ERROR(decoder(root.value("decoder", Json())));
    return added_tokens(root.value("added_tokens", Json()));
  }
};

}  // namespace

StatusOr<std::unique_ptr<BpeTokenizer>> parse_hf_tokenizer_json(std::string_view json, const std::string& source) {
  Parser p;
  p.source = source;
  p.spec.source = source;
  try {
    const Json root = Json::parse(json);
    LMT_RETURN_IF_ERROR(p.parse(root));
  } catch (const Json::exception& e) {  // parse error (with its byte offset) or a value of the wrong type
    return DataLoss(source + ": malformed tokenizer.json: " + e.what(), "is the file complete and unmodified?");
  }
  p.spec.description = std::string("tokenizer.json BPE ") + (p.byte_level ? "byte-level" : "SentencePiece-style");
  return BpeTokenizer::create(std::move(p.spec));
}

StatusOr<std::unique_ptr<BpeTokenizer>> load_hf_tokenizer_json(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::string text, read_file_bytes(path));
  return parse_hf_tokenizer_json(text, path);
}

}  // namespace lmt::data
