#include "text_inputs.h"

#include <nlohmann/json.hpp>

#include "lmt/io/input_stream.h"

namespace lmt::cli {
namespace {

std::vector<std::string_view> split_lines(std::string_view s) {
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < s.size();) {
    size_t end = s.find('\n', at);
    if (end == std::string_view::npos) end = s.size();
    lines.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

bool has_text_field(std::string_view line) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("text") && j["text"].is_string();
}

bool is_jsonl(const std::string& path, const std::vector<std::string_view>& lines) {
  if (io::is_jsonl_name(path)) return true;  // a.jsonl.gz is JSONL
  for (std::string_view l : lines)
    if (l.find_first_not_of(" \t\r") != std::string_view::npos) return has_text_field(l);
  return false;
}

StatusOr<std::vector<std::string>> jsonl_texts(const std::string& path, const std::vector<std::string_view>& lines) {
  std::vector<std::string> texts;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const auto j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      return InvalidArgument(path + ":" + std::to_string(i + 1) + ": not a JSON object with a string \"text\" field",
                             "a JSONL input holds one {\"text\": \"...\"} object per line");
    texts.push_back(j["text"].get<std::string>());
  }
  return texts;
}

}  // namespace

StatusOr<std::vector<std::string>> read_text_lines(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::string bytes, io::read_whole_input(path));
  const std::vector<std::string_view> lines = split_lines(bytes);
  if (is_jsonl(path, lines)) return jsonl_texts(path, lines);
  return std::vector<std::string>(lines.begin(), lines.end());
}

StatusOr<std::vector<std::string>> read_documents(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::string bytes, io::read_whole_input(path));
  const std::vector<std::string_view> lines = split_lines(bytes);
  if (is_jsonl(path, lines)) return jsonl_texts(path, lines);
  return std::vector<std::string>{std::move(bytes)};
}

}  // namespace lmt::cli
