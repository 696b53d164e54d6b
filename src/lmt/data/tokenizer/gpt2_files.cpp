// GPT-2's encoder.json (byte-level token text -> id) and vocab.bpe (one merge "a b" per line, in
// rank order, after a "#version" line), as OpenAI's gpt-2/src/encoder.py reads them.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "lmt/data/tokenizer/byte_level.h"
#include "lmt/data/tokenizer/loaders.h"

namespace lmt::data {

StatusOr<std::unique_ptr<BpeTokenizer>> load_gpt2_directory(const std::string& dir) {
  const std::string enc_path = (std::filesystem::path(dir) / "encoder.json").string();
  const std::string bpe_path = (std::filesystem::path(dir) / "vocab.bpe").string();
  LMT_ASSIGN_OR_RETURN(std::string enc_text, read_file_bytes(enc_path));
  LMT_ASSIGN_OR_RETURN(std::string bpe_text, read_file_bytes(bpe_path));

  nlohmann::json enc = nlohmann::json::parse(enc_text, nullptr, /*allow_exceptions=*/false);
  if (enc.is_discarded() || !enc.is_object())
    return DataLoss(enc_path + ": not a JSON object of token -> id", "is the file complete? re-download encoder.json");

  BpeTokenizerSpec spec;
  spec.source = dir;
  spec.description = "gpt2 encoder.json+vocab.bpe";
  BytesIdMap text_ids;  // byte-level text -> id, for the merges
  std::string bytes;
  const int64_t bound = token_id_bound(enc.size());
  for (const auto& [text, value] : enc.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= bound)
      return DataLoss(enc_path + ": the id of '" + text + "' is not an integer in [0, " + std::to_string(bound) + ")",
                      "ids number the " + std::to_string(enc.size()) + " tokens from 0 without large gaps; "
                      "is the file complete? re-download encoder.json");
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    if (!byte_level_decode(text, &bytes))
      return DataLoss(enc_path + ": token '" + text + "' has characters outside GPT-2's byte-level alphabet");
    if (static_cast<size_t>(id) >= spec.model_tokens.size()) spec.model_tokens.resize(id + 1);
    if (spec.model_tokens[id]) return DataLoss(enc_path + ": id " + std::to_string(id) + " is used twice");
    spec.model_tokens[id] = bytes;
    text_ids.insert(text, id);
  }

  std::vector<bool> produced(spec.model_tokens.size(), false);
  size_t line_no = 0;
  for (size_t at = 0; at < bpe_text.size();) {
    size_t end = bpe_text.find('\n', at);
    if (end == std::string::npos) end = bpe_text.size();
    std::string_view line(bpe_text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    const std::string where = bpe_path + ":" + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 >= line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      return DataLoss(where + ": expected a merge 'left right', got '" + std::string(line) + "'",
                      "is vocab.bpe complete? re-download it");
    const std::string_view a = line.substr(0, space), b = line.substr(space + 1);
    const int32_t left = text_ids.find(a), right = text_ids.find(b), merged = text_ids.find(std::string(a) + std::string(b));
    if (left < 0 || right < 0 || merged < 0)
      return DataLoss(where + ": merge '" + std::string(line) + "' uses or makes a token that encoder.json lacks",
                      "encoder.json and vocab.bpe must come from the same release");
    spec.merges.push_back({left, right, static_cast<int32_t>(spec.merges.size()), merged});
    produced[merged] = true;
  }
  // Every multi-byte token must come out of a merge; one that does not and looks like <|name|> is a
  // special token (<|endoftext|>), any other means vocab.bpe lost its tail.
  for (size_t id = 0; id < spec.model_tokens.size(); ++id) {
    const auto& t = spec.model_tokens[id];
    if (!t || t->size() <= 1 || produced[id]) continue;
    if (t->starts_with("<|") && t->ends_with("|>")) {
      spec.added_tokens.push_back({*t, static_cast<int32_t>(id), true});
      spec.model_tokens[id].reset();
      continue;
    }
    return DataLoss(bpe_path + ": no merge makes the token '" + byte_level_encode(*t) + "' (id " + std::to_string(id) +
                        ") of encoder.json; vocab.bpe looks truncated (" + std::to_string(spec.merges.size()) + " merges)",
                    "re-download vocab.bpe; it must hold every merge of the release");
  }
  LMT_ASSIGN_OR_RETURN(Pretokenizer regex, Pretokenizer::create(std::string(gpt2_pattern())));
  spec.split_steps.push_back({SplitStep::Kind::kRegex, std::move(regex), ""});
  spec.options.symbols = BpeOptions::Symbols::kBytes;
  return BpeTokenizer::create(std::move(spec));
}

}  // namespace lmt::data
