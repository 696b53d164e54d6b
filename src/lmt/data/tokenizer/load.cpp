// load_tokenizer(): which loader a path means. Decided by what is there, not by guessing contents:
// a directory (GPT-2 files or a tokenizer.json inside), a *.json file, or a rank file.
#include <filesystem>

#include "lmt/data/tokenizer/loaders.h"

namespace lmt::data {

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path, const std::string& encoding) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string hint = "give a tokenizer.json, a .tiktoken file (with --encoding when its name is not e.g. "
                           "cl100k_base.tiktoken) or a directory with GPT-2's encoder.json and vocab.bpe";
  if (!fs::exists(path, ec)) return NotFound(path + ": no such file or directory", hint);
  StatusOr<std::unique_ptr<BpeTokenizer>> t = NotFound(path);
  const bool is_json = fs::path(path).extension() == ".json";
  if (!encoding.empty() && (fs::is_directory(path, ec) || is_json))
    return InvalidArgument("--encoding " + encoding + " applies to .tiktoken rank files, not to " + path,
                           "leave --encoding out: " + path + " carries its own pattern and special tokens");
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "encoder.json", ec) && fs::exists(fs::path(path) / "vocab.bpe", ec))
      t = load_gpt2_directory(path);
    else if (fs::exists(fs::path(path) / "tokenizer.json", ec))
      t = load_hf_tokenizer_json((fs::path(path) / "tokenizer.json").string());
    else
      return NotFound(path + ": directory holds neither encoder.json + vocab.bpe nor tokenizer.json", hint);
  } else if (is_json) {
    t = load_hf_tokenizer_json(path);
  } else if (fs::path(path).extension() == ".tiktoken" || !encoding.empty()) {
    t = load_tiktoken_file(path, encoding);
  } else {
    return InvalidArgument(path + ": not a recognised tokenizer file (expected *.json, *.tiktoken or a directory)", hint);
  }
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(std::move(t).value());
}

}  // namespace lmt::data
