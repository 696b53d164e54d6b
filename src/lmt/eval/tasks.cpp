#include "lmt/eval/tasks.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "lmt/io/input_stream.h"

namespace lmt::eval {
namespace {

using nlohmann::json;

// Where a line came from, for messages: "FILE:LINE".
struct Where {
  const std::string& path;
  int64_t line;
  std::string str() const { return path + ":" + std::to_string(line); }
};

Status bad_line(const Where& w, const std::string& what, const std::string& hint) {
  return DataLoss(w.str() + ": " + what, hint);
}

StatusOr<std::string> get_string(const json& j, const char* key, const Where& w, const std::string& format) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    return bad_line(w, std::string("missing string field '") + key + "'", "each line must be " + format);
  return it->get<std::string>();
}

StatusOr<std::vector<std::string>> get_strings(const json& j, const char* key, const Where& w, const std::string& format) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() < 2)
    return bad_line(w, std::string("field '") + key + "' must be a list of at least two strings", "each line must be " + format);
  std::vector<std::string> out;
  for (const auto& e : *it) {
    if (!e.is_string()) return bad_line(w, std::string("field '") + key + "' holds a non-string", "each line must be " + format);
    out.push_back(e.get<std::string>());
  }
  return out;
}

// An integer label in [0, n) from a number or a digit string ("1"), shifted by `base`.
StatusOr<int> get_label(const json& v, int base, size_t n, const Where& w, const char* key) {
  int64_t x = -1;
  if (v.is_number_integer()) x = v.get<int64_t>();
  else if (v.is_string() && !v.get<std::string>().empty()) {
    const std::string s = v.get<std::string>();
    x = 0;
    for (char c : s) {
      if (!std::isdigit(static_cast<unsigned char>(c))) { x = -1; break; }
      x = x * 10 + (c - '0');
      if (x > 1000000) break;
    }
  }
  x = x < base ? -1 : x - base;  // not x -= base: x may be INT64_MIN
  if (x < 0 || x >= static_cast<int64_t>(n))
    // A label from a labels file is raw bytes: dump() would throw on invalid UTF-8, so it is replaced.
    return bad_line(w, std::string("label '") + key + "' = " + v.dump(-1, ' ', false, json::error_handler_t::replace) +
                           " is not one of the " + std::to_string(n) + " choices",
                    base == 1 ? "labels count from 1 here" : "labels count from 0 here");
  return static_cast<int>(x);
}

// The lines of a labels file (PIQA/WinoGrande "-labels.lst", plain or compressed), blank lines
// included as "".
StatusOr<std::vector<std::string>> read_lines(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<io::InputStream> in, io::open_input(path));
  io::LineReader reader(std::move(in));
  std::vector<std::string> lines;
  for (std::string_view s;;) {
    LMT_ASSIGN_OR_RETURN(bool more, reader.next(&s));
    if (!more) break;
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    lines.emplace_back(s);
  }
  return lines;
}

// FILE.jsonl (or FILE.jsonl.gz / .zst) -> FILE-labels.lst, or its .gz / .zst copy when only that exists.
std::string labels_path_of(const std::string& path) {
  std::string stem = io::strip_compression_suffix(path);
  if (stem.size() > 6 && stem.ends_with(".jsonl")) stem.resize(stem.size() - 6);
  const std::string plain = stem + "-labels.lst";
  std::error_code ec;
  if (!std::filesystem::exists(plain, ec))
    for (const char* ext : {".gz", ".zst"})
      if (std::filesystem::exists(plain + ext, ec)) return plain + ext;
  return plain;
}

// Calls parse(object, where) for every non-blank line of a JSONL file.
Status for_each_object(const std::string& path, const std::function<Status(const json&, const Where&)>& parse) {
  auto opened = io::open_input(path);  // plain, .gz or .zst
  if (!opened.ok() && opened.status().code() == StatusCode::kNotFound)
    return NotFound("cannot open eval file " + path, "check --data (the eval files are described in docs/EVAL.md)");
  LMT_RETURN_IF_ERROR(opened.status());
  io::LineReader reader(std::move(*opened));
  int64_t line = 0;
  for (std::string_view s;;) {
    LMT_ASSIGN_OR_RETURN(bool more, reader.next(&s));
    if (!more) break;
    ++line;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    const Where w{path, line};
    json j = json::parse(s, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return bad_line(w, "not a JSON object", "every non-blank line must be one JSON object");
    LMT_RETURN_IF_ERROR(parse(j, w));
  }
  if (line == 0) return DataLoss(path + " is empty", "expected one JSON object per line");
  return Status::Ok();
}

// Canonical AI2 form shared by ARC and OpenBookQA.
Status parse_ai2(const json& j, const Where& w, bool question_template, McItem* item) {
  const std::string format = "{\"question\": {\"stem\", \"choices\": [{\"text\", \"label\"}]}, \"answerKey\"}";
  auto q = j.find("question");
  if (q == j.end() || !q->is_object()) return bad_line(w, "missing object field 'question'", "each line must be " + format);
  LMT_ASSIGN_OR_RETURN(std::string stem, get_string(*q, "stem", w, format));
  LMT_ASSIGN_OR_RETURN(std::string key, get_string(j, "answerKey", w, format));
  auto ch = q->find("choices");
  if (ch == q->end() || !ch->is_array() || ch->size() < 2) return bad_line(w, "'question.choices' must list at least two choices", "each line must be " + format);
  item->gold = -1;
  for (const auto& c : *ch) {
    if (!c.is_object()) return bad_line(w, "a choice is not an object", "each line must be " + format);
    LMT_ASSIGN_OR_RETURN(std::string text, get_string(c, "text", w, format));
    LMT_ASSIGN_OR_RETURN(std::string label, get_string(c, "label", w, format));
    if (label == key) item->gold = static_cast<int>(item->choices.size());
    item->choices.push_back(" " + text);
  }
  if (item->gold < 0) return bad_line(w, "answerKey '" + key + "' is not the label of any choice", "fix the answerKey or the choice labels");
  item->context = question_template ? "Question: " + stem + "\nAnswer:" : stem;
  return Status::Ok();
}

Status parse_arc(const json& j, const Where& w, McItem* item) {
  if (j.contains("question")) return parse_ai2(j, w, /*question_template=*/true, item);
  const std::string format = "{\"query\": \"Question: ...\", \"choices\": [...], \"gold\": i} (llm-foundry) or canonical ARC";
  LMT_ASSIGN_OR_RETURN(std::string query, get_string(j, "query", w, format));
  LMT_ASSIGN_OR_RETURN(auto choices, get_strings(j, "choices", w, format));
  if (!j.contains("gold")) return bad_line(w, "missing field 'gold'", "each line must be " + format);
  LMT_ASSIGN_OR_RETURN(item->gold, get_label(j["gold"], 0, choices.size(), w, "gold"));
  // llm-foundry kept "Question: " in the query; the harness template adds "\nAnswer:".
  if (!query.starts_with("Question: ")) query = "Question: " + query;
  item->context = query + "\nAnswer:";
  for (auto& c : choices) item->choices.push_back(" " + c);
  return Status::Ok();
}

Status parse_piqa(const json& j, const Where& w, McItem* item) {
  const std::string format = "{\"goal\", \"sol1\", \"sol2\"}";
  LMT_ASSIGN_OR_RETURN(std::string goal, get_string(j, "goal", w, format));
  LMT_ASSIGN_OR_RETURN(std::string sol1, get_string(j, "sol1", w, format));
  LMT_ASSIGN_OR_RETURN(std::string sol2, get_string(j, "sol2", w, format));
  item->context = "Question: " + goal + "\nAnswer:";
  item->choices = {" " + sol1, " " + sol2};
  item->gold = -1;  // from "label" or the labels file
  if (j.contains("label")) {
    LMT_ASSIGN_OR_RETURN(item->gold, get_label(j["label"], 0, 2, w, "label"));
  }
  return Status::Ok();
}

Status parse_winogrande(const json& j, const Where& w, McItem* item) {
  const std::string format = "{\"sentence\" with one '_', \"option1\", \"option2\", \"answer\"}";
  LMT_ASSIGN_OR_RETURN(std::string sentence, get_string(j, "sentence", w, format));
  LMT_ASSIGN_OR_RETURN(std::string o1, get_string(j, "option1", w, format));
  LMT_ASSIGN_OR_RETURN(std::string o2, get_string(j, "option2", w, format));
  const size_t blank = sentence.find('_');
  if (blank == std::string::npos) return bad_line(w, "'sentence' has no '_' blank", "the option replaces the '_' in the sentence");
  // Partial scoring (Trinh & Le 2018, as the harness does): the option completes the context up
  // to the blank; the shared rest of the sentence is the continuation being scored.
  std::string rest = sentence.substr(blank + 1);
  const size_t a = rest.find_first_not_of(" \t"), b = rest.find_last_not_of(" \t");
  rest = a == std::string::npos ? "" : rest.substr(a, b - a + 1);
  if (rest.empty()) return bad_line(w, "nothing follows the '_' blank", "partial scoring needs text after the blank");
  const std::string head = sentence.substr(0, blank);
  item->contexts = {head + o1, head + o2};
  item->choices = {" " + rest, " " + rest};
  item->gold = -1;
  if (j.contains("answer") && !(j["answer"].is_string() && j["answer"].get<std::string>().empty())) {
    LMT_ASSIGN_OR_RETURN(item->gold, get_label(j["answer"], 1, 2, w, "answer"));
  }
  return Status::Ok();
}

// Python's str.capitalize() on ASCII: first letter upper, the rest lower.
std::string capitalize(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

Status parse_hellaswag(const json& j, const Where& w, McItem* item) {
  const std::string format = "{\"activity_label\", \"ctx\" (or \"ctx_a\" + \"ctx_b\"), \"endings\", \"label\"}";
  LMT_ASSIGN_OR_RETURN(std::string label, get_string(j, "activity_label", w, format));
  std::string ctx;
  if (j.contains("ctx_a")) {  // canonical: the harness capitalises ctx_b
    LMT_ASSIGN_OR_RETURN(std::string a, get_string(j, "ctx_a", w, format));
    LMT_ASSIGN_OR_RETURN(std::string b, get_string(j, "ctx_b", w, format));
    ctx = a + " " + capitalize(b);
  } else {
    LMT_ASSIGN_OR_RETURN(ctx, get_string(j, "ctx", w, format));
  }
  LMT_ASSIGN_OR_RETURN(auto endings, get_strings(j, "endings", w, format));
  if (!j.contains("label")) return bad_line(w, "missing field 'label'", "each line must be " + format);
  LMT_ASSIGN_OR_RETURN(item->gold, get_label(j["label"], 0, endings.size(), w, "label"));
  item->context = hellaswag_preprocess(label + ": " + ctx);
  for (const auto& e : endings) item->choices.push_back(" " + hellaswag_preprocess(e));
  return Status::Ok();
}

// Fills gold from FILE-labels.lst for items that did not carry a label.
Status apply_labels_file(const std::string& path, int base, std::vector<McItem>& items) {
  bool needed = false;
  for (const auto& it : items) needed = needed || it.gold < 0;
  if (!needed) return Status::Ok();
  const std::string lp = labels_path_of(path);
  auto lines = read_lines(lp);
  if (!lines.ok())
    return NotFound(path + " has no labels in its lines and " + lp + " cannot be opened",
                    "put the labels file (one label per line, line-aligned) beside the data file");
  for (auto& it : items) {
    const Where w{lp, it.line};
    if (it.line > static_cast<int64_t>(lines->size()))
      return DataLoss(w.str() + ": the labels file ends before line " + std::to_string(it.line) + " of " + path,
                      "the labels file must have one label per line of the data file");
    std::string s = (*lines)[it.line - 1];
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    LMT_ASSIGN_OR_RETURN(it.gold, get_label(json(s), base, it.choices.size(), w, "label"));
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"arc_easy", "arc_challenge", "openbookqa", "piqa", "hellaswag", "winogrande"};
  return names;
}

std::string hellaswag_preprocess(const std::string& in) {
  const size_t a = in.find_first_not_of(" \t\r\n"), b = in.find_last_not_of(" \t\r\n");
  std::string s = a == std::string::npos ? "" : in.substr(a, b - a + 1);
  for (size_t p; (p = s.find(" [title]")) != std::string::npos;) s.replace(p, 8, ". ");
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {  // re.sub("\[.*?\]", "", s)
    if (s[i] == '[') {
      const size_t close = s.find(']', i + 1);
      if (close != std::string::npos) { i = close; continue; }
    }
    out += s[i];
  }
  // str.replace("  ", " "): one left-to-right pass over non-overlapping pairs, as Python does.
  std::string res;
  for (size_t i = 0; i < out.size(); ++i) {
    res += out[i];
    if (out[i] == ' ' && i + 1 < out.size() && out[i + 1] == ' ') ++i;
  }
  return res;
}

StatusOr<std::vector<McItem>> parse_task(const std::string& task, const std::string& path) {
  std::function<Status(const json&, const Where&, McItem*)> parse;
  int label_base = 0;
  if (task == "arc_easy" || task == "arc_challenge") parse = parse_arc;
  else if (task == "openbookqa") parse = [](const json& j, const Where& w, McItem* it) { return parse_ai2(j, w, false, it); };
  else if (task == "piqa") parse = parse_piqa;
  else if (task == "winogrande") { parse = parse_winogrande; label_base = 1; }
  else if (task == "hellaswag") parse = parse_hellaswag;
  else {
    std::string names;
    for (const auto& n : task_names()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown eval task '" + task + "'", "valid tasks: " + names + ", val");
  }
  if (std::filesystem::is_directory(path))
    return InvalidArgument("--data " + path + " is a directory; task " + task + " reads one JSONL file", "pass the file, e.g. piqa/valid.jsonl");
  std::vector<McItem> items;
  Status s = for_each_object(path, [&](const json& j, const Where& w) {
    McItem item;
    item.line = w.line;
    LMT_RETURN_IF_ERROR(parse(j, w, &item));
    items.push_back(std::move(item));
    return Status::Ok();
  });
  LMT_RETURN_IF_ERROR(s);
  LMT_RETURN_IF_ERROR(apply_labels_file(path, label_base, items));
  return items;
}

}  // namespace lmt::eval
