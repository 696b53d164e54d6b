// tiktoken rank files. The encodings' patterns and special tokens are constants here (tiktoken keeps
// them in code, not in the rank files), so the product never needs anything but the .tiktoken file.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lmt/data/tokenizer/loaders.h"

namespace lmt::data {
namespace {

const std::vector<TiktokenEncoding>& encodings() {
  static const std::vector<TiktokenEncoding> all = {
      {"r50k_base", gpt2_pattern(), {{"<|endoftext|>", 50256}}},
      {"p50k_base", gpt2_pattern(), {{"<|endoftext|>", 50256}}},
      {"cl100k_base",
       cl100k_pattern(),
       {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}}},
      {"o200k_base", o200k_pattern(), {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  return all;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 with '=' padding; false on any other character or a bad length.
bool base64_decode(std::string_view in, std::string* out) {
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size() - pad; ++i) {
    const int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      *out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
}

}  // namespace

const TiktokenEncoding* find_tiktoken_encoding(std::string_view name) {
  for (const TiktokenEncoding& e : encodings())
    if (e.name == name) return &e;
  return nullptr;
}

std::string tiktoken_encoding_names() {
  std::string s;
  for (const TiktokenEncoding& e : encodings()) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

StatusOr<std::string> read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound(path + ": no such file", "check the path");
  if (std::filesystem::is_directory(path, ec)) return InvalidArgument(path + ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return std::move(ss).str();
}

StatusOr<std::vector<std::optional<std::string>>> read_tiktoken_ranks(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::string text, read_file_bytes(path));
  std::vector<std::optional<std::string>> ranks;
  std::string bytes;
  size_t line_no = 0;
  const std::string hint = "each line of a .tiktoken file is '<base64 token> <rank>' (e.g. 'IQ== 0')";
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  const int64_t bound = token_id_bound(lines);
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) return DataLoss(where + ": no space between token and rank", hint);
    if (!base64_decode(line.substr(0, space), &bytes))
      return DataLoss(where + ": '" + std::string(line.substr(0, space)) + "' is not valid base64", hint);
    const std::string_view num = line.substr(space + 1);
    int64_t rank = 0;
    for (char c : num) {
      if (c < '0' || c > '9' || rank > (int64_t{1} << 30)) {
        rank = -1;
        break;
      }
      rank = rank * 10 + (c - '0');
    }
    if (num.empty() || rank < 0 || rank >= (int64_t{1} << 30))
      return DataLoss(where + ": rank '" + std::string(num) + "' is not a number below 2^30", hint);
    if (rank >= bound)
      return DataLoss(where + ": rank " + std::to_string(rank) + " is far beyond the file's " +
                          std::to_string(lines) + " lines (ranks must be below " + std::to_string(bound) + ")",
                      "ranks number the tokens from 0 without large gaps; the file is corrupt or not a .tiktoken file");
    if (static_cast<size_t>(rank) >= ranks.size()) ranks.resize(static_cast<size_t>(rank) + 1);
    if (ranks[rank]) return DataLoss(where + ": rank " + std::to_string(rank) + " appears twice", hint);
    ranks[rank] = bytes;
  }
  if (ranks.empty()) return DataLoss(path + ": no tokens in the file", hint);
  return ranks;
}

StatusOr<std::unique_ptr<BpeTokenizer>> make_tiktoken_tokenizer(
    std::vector<std::optional<std::string>> ranks, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& special_tokens, const std::string& source,
    const std::string& description) {
  BpeTokenizerSpec spec;
  spec.source = source;
  spec.description = description;
  LMT_ASSIGN_OR_RETURN(Pretokenizer regex, Pretokenizer::create(pattern));
  spec.split_steps.push_back({SplitStep::Kind::kRegex, std::move(regex), ""});
  BytesIdMap ids;
  ids.reserve(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) continue;
    if (ranks[r]->empty()) return DataLoss(source + ": rank " + std::to_string(r) + " is an empty token");
    if (ids.find(*ranks[r]) >= 0)
      return DataLoss(source + ": the bytes of rank " + std::to_string(r) + " also have rank " +
                      std::to_string(ids.find(*ranks[r])), "every token must appear once");
    ids.insert(*ranks[r], static_cast<int32_t>(r));
  }
  // tiktoken merges the adjacent pair whose concatenation has the lowest rank; as a pair table that
  // is, for every token and every split of it into two tokens, (left, right) -> the token's rank.
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r]) continue;
    const std::string_view t = *ranks[r];
    for (size_t k = 1; k < t.size(); ++k) {
      const int32_t left = ids.find(t.substr(0, k)), right = ids.find(t.substr(k));
      if (left >= 0 && right >= 0)
        spec.merges.push_back({left, right, static_cast<int32_t>(r), static_cast<int32_t>(r)});
    }
  }
  for (const auto& [text, id] : special_tokens) {
    if (static_cast<size_t>(id) < ranks.size() && ranks[id])
      return InvalidArgument(source + ": special token " + text + " has id " + std::to_string(id) +
                             ", which is already an ordinary token's rank");
    spec.added_tokens.push_back({text, id, true});
  }
  spec.model_tokens = std::move(ranks);
  spec.options.symbols = BpeOptions::Symbols::kBytes;
  spec.options.whole_piece_lookup = true;  // tiktoken looks every piece up whole before merging
  return BpeTokenizer::create(std::move(spec));
}

StatusOr<std::unique_ptr<BpeTokenizer>> load_tiktoken_file(const std::string& path, const std::string& encoding) {
  std::string name = encoding;
  if (name.empty()) {
    name = std::filesystem::path(path).filename().string();
    if (name.ends_with(".tiktoken")) name.resize(name.size() - 9);
  }
  const TiktokenEncoding* enc = find_tiktoken_encoding(name);
  if (enc == nullptr)
    return InvalidArgument(
        encoding.empty() ? path + ": cannot tell the encoding from the file name ('" + name + "')"
                         : "unknown tiktoken encoding '" + encoding + "' for " + path,
        "pass --encoding with one of " + tiktoken_encoding_names() + " (they fix the pattern and special tokens)");
  LMT_ASSIGN_OR_RETURN(auto ranks, read_tiktoken_ranks(path));
  std::vector<std::pair<std::string, int32_t>> specials;
  for (const auto& [text, id] : enc->special_tokens) specials.emplace_back(std::string(text), id);
  return make_tiktoken_tokenizer(std::move(ranks), std::string(enc->pattern), specials, path,
                                 "tiktoken " + std::string(enc->name));
}

}  // namespace lmt::data
