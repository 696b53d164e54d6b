// `lmtrain tokenizer encode|decode`: text <-> ids with any tokenizer lmtrain loads (tokenizer.json,
// a .tiktoken rank file with --encoding, or a GPT-2 directory). `train` is registered beside them
// by tokenizer_train_cmd.cpp.
//
//   encode --tokenizer T (--text S | --input FILE) [--json] [--special-tokens]
//     --text: the ids of S on one line. --input: one line of ids per input line (the `text` field
//     of each line of a JSONL file). Ids are space-separated, or {"ids": [...]} lines with --json.
//   decode --tokenizer T (--ids "1,2,3" | --input FILE) [--json]
//     --input holds one {"ids": [...]} per line. Each decoded text is written as its exact bytes
//     followed by '\n', or as {"text": "..."} with --json (invalid UTF-8 shown as U+FFFD there).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lmt/data/tokenizer/bpe_tokenizer.h"
#include "lmt/data/tokenizer/loaders.h"
#include "text_inputs.h"

namespace lmt::cli {
namespace {

struct TokenizerArgs {
  std::string tokenizer, encoding, text, input, ids;
  bool json = false, special_tokens = false;
  bool text_given = false;  // --text "" is a valid (empty) text
};

void print_ids(const std::vector<int32_t>& ids, bool json) {
  std::string line = json ? "{\"ids\": [" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += json ? ", " : " ";
    line += std::to_string(ids[i]);
  }
  line += json ? "]}\n" : "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
}

Status run_encode(const TokenizerArgs& a) {
  if (a.text_given == !a.input.empty())
    return UsageError("give either --text or --input", "e.g. --text \"Hello world\" or --input texts.jsonl");
  LMT_ASSIGN_OR_RETURN(auto tok, data::load_tokenizer(a.tokenizer, a.encoding));
  const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(tok.get());
  if (a.special_tokens && bpe == nullptr)
    return InvalidArgument("--special-tokens is not available for " + a.tokenizer);
  auto encode = [&](const std::string& text) {
    return a.special_tokens ? bpe->encode_with_special_tokens(text) : tok->encode(text);
  };
  if (a.text_given) {
    print_ids(encode(a.text), a.json);
    return Status::Ok();
  }
  LMT_ASSIGN_OR_RETURN(std::vector<std::string> texts, read_text_lines(a.input));
  for (const std::string& t : texts) print_ids(encode(t), a.json);
  return Status::Ok();
}

// "1,2, 3" or "1 2 3" -> ids; errors name the offending item.
StatusOr<std::vector<int32_t>> parse_id_list(const std::string& s, int64_t vocab_size) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at < s.size()) {
    const size_t start = s.find_first_not_of(", \t\n", at);
    if (start == std::string::npos) break;
    size_t end = s.find_first_of(", \t\n", start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    int64_t v = -1;
    if (item.size() <= 10 && item.find_first_not_of("0123456789") == std::string::npos) v = std::stoll(item);
    if (v < 0 || v >= vocab_size)
      return InvalidArgument("--ids: '" + item + "' is not a token id in [0, " + std::to_string(vocab_size) + ")",
                             "pass ids as --ids \"1,2,3\"");
    ids.push_back(static_cast<int32_t>(v));
    at = end;
  }
  return ids;
}

void print_text(const std::string& text, bool json) {
  if (json) {
    const std::string line =
        nlohmann::json{{"text", text}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

Status run_decode(const TokenizerArgs& a) {
  if (a.ids.empty() == a.input.empty()) return UsageError("give either --ids or --input", "e.g. --ids \"15496,995\"");
  LMT_ASSIGN_OR_RETURN(auto tok, data::load_tokenizer(a.tokenizer, a.encoding));
  if (!a.ids.empty()) {
    LMT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_id_list(a.ids, tok->vocab_size()));
    print_text(tok->decode(ids), a.json);
    return Status::Ok();
  }
  LMT_ASSIGN_OR_RETURN(std::string bytes, data::read_file_bytes(a.input));
  size_t line_no = 0;
  for (size_t at = 0; at < bytes.size();) {
    size_t end = bytes.find('\n', at);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view line(bytes.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = a.input + ":" + std::to_string(line_no);
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array())
      return InvalidArgument(where + ": not a JSON object with an \"ids\" list", "each line is {\"ids\": [1, 2, 3]}");
    std::vector<int32_t> ids;
    for (const auto& v : j["ids"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok->vocab_size())
        return InvalidArgument(where + ": " + v.dump() + " is not a token id in [0, " + std::to_string(tok->vocab_size()) + ")");
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    print_text(tok->decode(ids), a.json);
  }
  return Status::Ok();
}

void add_tokenizer_options(CLI::App* sub, TokenizerArgs& a) {
  sub->add_option("--tokenizer", a.tokenizer, "tokenizer.json, a .tiktoken file, or a GPT-2 directory (encoder.json + vocab.bpe)")
      ->required();
  sub->add_option("--encoding", a.encoding,
                  "for a .tiktoken file: " + data::tiktoken_encoding_names() + " (default: from the file name)");
  sub->add_flag("--json", a.json, "JSON lines output");
}

}  // namespace

CLI::App* add_tokenizer_command(CLI::App& app, Runner& runner) {
  CLI::App* tokenizer = app.add_subcommand("tokenizer", "train, encode and decode tokenizers");
  tokenizer->require_subcommand(1);

  static TokenizerArgs enc;
  CLI::App* e = tokenizer->add_subcommand("encode", "text -> token ids (special tokens in the text are plain text)");
  add_tokenizer_options(e, enc);
  auto* text = e->add_option("--text", enc.text, "the text to encode");
  auto* input = e->add_option("--input", enc.input, "a file: one text per line, or JSONL with a \"text\" field");
  text->excludes(input);
  e->add_flag("--special-tokens", enc.special_tokens,
              "turn special/added token texts (e.g. <|endoftext|>) into their ids instead of encoding them as text");
  e->callback([&runner, text] {
    enc.text_given = text->count() > 0;
    runner.set(run_encode(enc));
  });

  static TokenizerArgs dec;
  CLI::App* d = tokenizer->add_subcommand("decode", "token ids -> text");
  add_tokenizer_options(d, dec);
  auto* ids = d->add_option("--ids", dec.ids, "ids separated by commas or spaces, e.g. \"15496,995\"");
  auto* dinput = d->add_option("--input", dec.input, "a file with one {\"ids\": [...]} per line");
  ids->excludes(dinput);
  d->callback([&runner] { runner.set(run_decode(dec)); });
  return tokenizer;
}

}  // namespace lmt::cli
