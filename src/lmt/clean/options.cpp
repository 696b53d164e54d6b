#include "lmt/clean/options.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <variant>

#include <toml++/toml.h>

#include "lmt/base/edit_distance.h"

namespace lmt::clean {
namespace {

using Target = std::variant<bool*, int64_t*, double*, std::string*, std::vector<std::string>*>;

struct Binding {
  std::string key;
  Target target;
  std::string doc;
};

// Every key, bound to its field of `o`.
std::vector<Binding> bind(CleanOptions& o) {
  std::vector<Binding> b = {
      {"input.text_field", &o.text_field, "JSONL field that holds the document text (the other fields are copied as they are)"},
      {"normalize.control_chars", &o.normalize.control_chars, "drop C0 (except tab, newline, CR), DEL and C1 control characters"},
      {"normalize.nfc", &o.normalize.nfc, "Unicode NFC"},
      {"normalize.whitespace", &o.normalize.whitespace, "CRLF/CR to LF, trim lines, collapse spaces and blank-line runs, trim the document"},
      {"gopher_repetition.enabled", &o.gopher_repetition.enabled, "datatrove GopherRepetitionFilter"},
      {"gopher_repetition.dup_line_frac", &o.gopher_repetition.dup_line_frac, "max fraction of lines that repeat an earlier line"},
      {"gopher_repetition.dup_para_frac", &o.gopher_repetition.dup_para_frac, "max fraction of paragraphs that repeat an earlier one"},
      {"gopher_repetition.dup_line_char_frac", &o.gopher_repetition.dup_line_char_frac, "max fraction of characters in repeated lines"},
      {"gopher_repetition.dup_para_char_frac", &o.gopher_repetition.dup_para_char_frac, "max fraction of characters in repeated paragraphs"},
  };
  for (auto& [n, frac] : o.gopher_repetition.top_n_grams)
    b.push_back({"gopher_repetition.top_" + std::to_string(n) + "_gram", &frac,
                 "max character fraction of the most frequent " + std::to_string(n) + "-gram"});
  for (auto& [n, frac] : o.gopher_repetition.dup_n_grams)
    b.push_back({"gopher_repetition.dup_" + std::to_string(n) + "_gram", &frac,
                 "max character fraction of repeated " + std::to_string(n) + "-grams"});
  std::vector<Binding> rest = {
      {"gopher_quality.enabled", &o.gopher_quality.enabled, "datatrove GopherQualityFilter"},
      {"gopher_quality.min_doc_words", &o.gopher_quality.min_doc_words, "min words (not counting punctuation-only words)"},
      {"gopher_quality.max_doc_words", &o.gopher_quality.max_doc_words, "max words"},
      {"gopher_quality.min_avg_word_length", &o.gopher_quality.min_avg_word_length, "min mean word length (characters)"},
      {"gopher_quality.max_avg_word_length", &o.gopher_quality.max_avg_word_length, "max mean word length"},
      {"gopher_quality.max_symbol_word_ratio", &o.gopher_quality.max_symbol_word_ratio, "max '#' per word, and max '...' per word"},
      {"gopher_quality.max_bullet_lines_ratio", &o.gopher_quality.max_bullet_lines_ratio, "max fraction of lines starting with a bullet"},
      {"gopher_quality.max_ellipsis_lines_ratio", &o.gopher_quality.max_ellipsis_lines_ratio, "max fraction of lines ending in an ellipsis"},
      {"gopher_quality.max_non_alpha_words_ratio", &o.gopher_quality.max_non_alpha_words_ratio, "min fraction of words with a letter (datatrove's name)"},
      {"gopher_quality.min_stop_words", &o.gopher_quality.min_stop_words, "min distinct stop words present"},
      {"gopher_quality.stop_words", &o.gopher_quality.stop_words, "the stop words"},
      {"c4.enabled", &o.c4.enabled, "datatrove C4QualityFilter (drops lines; may drop the document)"},
      {"c4.remove_citations", &o.c4.remove_citations, "remove [1], [edit], [citation needed]"},
      {"c4.filter_no_terminal_punct", &o.c4.filter_no_terminal_punct, "drop lines not ending in . ? ! \" ' (or ending in ...)"},
      {"c4.min_num_sentences", &o.c4.min_num_sentences, "drop documents with fewer sentences after line filtering (-1: off)"},
      {"c4.min_words_per_line", &o.c4.min_words_per_line, "drop lines with fewer words (-1: off)"},
      {"c4.max_word_length", &o.c4.max_word_length, "drop lines with a longer word (-1: off)"},
      {"c4.filter_lorem_ipsum", &o.c4.filter_lorem_ipsum, "drop documents with 'lorem ipsum'"},
      {"c4.filter_javascript", &o.c4.filter_javascript, "drop lines with 'javascript'"},
      {"c4.filter_curly_bracket", &o.c4.filter_curly_bracket, "drop documents with '{'"},
      {"c4.filter_policy", &o.c4.filter_policy, "drop lines with 'terms of use', 'privacy policy', cookie notices"},
      {"fineweb.enabled", &o.fineweb.enabled, "datatrove FineWebQualityFilter"},
      {"fineweb.line_punct_thr", &o.fineweb.line_punct_thr, "min fraction of lines ending in terminal punctuation"},
      {"fineweb.line_punct_exclude_zero", &o.fineweb.line_punct_exclude_zero, "keep documents where no line ends in punctuation"},
      {"fineweb.short_line_thr", &o.fineweb.short_line_thr, "max fraction of short lines"},
      {"fineweb.short_line_length", &o.fineweb.short_line_length, "a short line has at most this many characters"},
      {"fineweb.char_duplicates_ratio", &o.fineweb.char_duplicates_ratio, "max fraction of characters in duplicated lines"},
      {"fineweb.new_line_ratio", &o.fineweb.new_line_ratio, "max newlines per word"},
      {"exact_dedup.enabled", &o.exact_dedup, "drop documents whose normalised text was seen before"},
      {"exact_dedup.lines", &o.exact_dedup_lines, "C4-style: drop lines seen in an earlier kept document"},
      {"exact_dedup.min_line_chars", &o.exact_dedup_min_line_chars, "lines shorter than this are never dropped as duplicates"},
      {"minhash.enabled", &o.minhash.enabled, "MinHash-LSH near-duplicate removal (lmt_dedup)"},
      {"minhash.ngram", &o.minhash.ngram, "shingle length"},
      {"minhash.unit", &o.minhash.unit, "shingle unit: \"word\" or \"char\""},
      {"minhash.bands", &o.minhash.bands, "LSH bands (bands = rows = 0: chosen from threshold and num_hashes)"},
      {"minhash.rows", &o.minhash.rows, "hashes per band"},
      {"minhash.num_hashes", &o.minhash.num_hashes, "hashes when bands and rows are chosen from the threshold"},
      {"minhash.threshold", &o.minhash.threshold, "Jaccard threshold: of the verification, and for choosing bands x rows"},
      {"minhash.verify", &o.minhash.verify, "keep a candidate pair only if its true Jaccard >= threshold"},
      {"minhash.seed", &o.minhash.seed, "hash seed"},
      {"minhash.memory_budget_mb", &o.minhash.memory_budget_mb, "band buffers held in memory before they spill to DIR.tmp"},
      {"decontaminate.ngram", &o.decontaminate_ngram, "word n-gram length shared with an eval item that flags a document"},
      {"decontaminate.action", &o.decontaminate_action, "\"remove\" the flagged documents or only \"report\" them"},
      {"output.shard_bytes", &o.shard_bytes, "bytes per output shard before a new one starts"},
      {"output.removed_samples_per_reason", &o.removed_samples_per_reason, "removed documents kept in removed_sample.jsonl per reason"},
      {"run.batch_docs", &o.batch_docs, "documents handed to the workers at a time (does not change the output)"},
  };
  b.insert(b.end(), rest.begin(), rest.end());
  return b;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

std::string number(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos && s.find_first_not_of("-0123456789") == std::string::npos) s += ".0";
  return s;
}

struct Printer {
  std::string operator()(bool* v) const { return *v ? "true" : "false"; }
  std::string operator()(int64_t* v) const { return std::to_string(*v); }
  std::string operator()(double* v) const { return number(*v); }
  std::string operator()(std::string* v) const { return quote(*v); }
  std::string operator()(std::vector<std::string>* v) const {
    std::string s = "[";
    for (size_t i = 0; i < v->size(); ++i) s += (i ? ", " : "") + quote((*v)[i]);
    return s + "]";
  }
};

std::string type_of(const Target& t) {
  switch (t.index()) {
    case 0: return "bool";
    case 1: return "integer";
    case 2: return "number";
    case 3: return "string";
    default: return "list of strings";
  }
}

Status set_value(const Binding& b, const toml::node& n, const std::string& where) {
  auto wrong = [&] {
    return InvalidArgument(where + ": key '" + b.key + "' must be a " + type_of(b.target),
                           "docs/DATA_CLEAN.md lists every key with its type and default");
  };
  switch (b.target.index()) {
    case 0:
      if (!n.is_boolean()) return wrong();
      *std::get<bool*>(b.target) = n.as_boolean()->get();
      return Status::Ok();
    case 1:
      if (!n.is_integer()) return wrong();
      *std::get<int64_t*>(b.target) = n.as_integer()->get();
      return Status::Ok();
    case 2: {
      double v;
      if (n.is_floating_point()) v = n.as_floating_point()->get();
      else if (n.is_integer()) v = static_cast<double>(n.as_integer()->get());
      else return wrong();
      if (!std::isfinite(v)) return InvalidArgument(where + ": key '" + b.key + "' must be finite");
      *std::get<double*>(b.target) = v;
      return Status::Ok();
    }
    case 3:
      if (!n.is_string()) return wrong();
      *std::get<std::string*>(b.target) = n.as_string()->get();
      return Status::Ok();
    default: {
      const toml::array* a = n.as_array();
      if (!a) return wrong();
      std::vector<std::string> v;
      for (const auto& e : *a) {
        if (!e.is_string()) return wrong();
        v.push_back(e.as_string()->get());
      }
      *std::get<std::vector<std::string>*>(b.target) = std::move(v);
      return Status::Ok();
    }
  }
}

Status apply_table(const std::vector<Binding>& bs, const toml::table& t, const std::string& prefix, const std::string& where) {
  for (const auto& [k, node] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      LMT_RETURN_IF_ERROR(apply_table(bs, *sub, key, where));
      continue;
    }
    const Binding* found = nullptr;
    std::string closest;
    size_t best = SIZE_MAX;
    for (const auto& b : bs) {
      if (b.key == key) { found = &b; break; }
      if (size_t d = edit_distance(b.key, std::string_view(key).substr(0, kEditDistancePrefix)); d < best) { best = d; closest = b.key; }
    }
    if (!found) return InvalidArgument(where + ": unknown key '" + key + "'", "did you mean '" + closest + "'? (docs/DATA_CLEAN.md lists every key)");
    LMT_RETURN_IF_ERROR(set_value(*found, node, where));
  }
  return Status::Ok();
}

Status validate(const CleanOptions& o, const std::string& where) {
  if (o.minhash.unit != "word" && o.minhash.unit != "char")
    return InvalidArgument(where + ": minhash.unit = \"" + o.minhash.unit + "\"", "expected \"word\" or \"char\"");
  if (o.decontaminate_action != "remove" && o.decontaminate_action != "report")
    return InvalidArgument(where + ": decontaminate.action = \"" + o.decontaminate_action + "\"", "expected \"remove\" or \"report\"");
  if (o.decontaminate_ngram < 1 || o.decontaminate_ngram > 64)
    return InvalidArgument(where + ": decontaminate.ngram = " + std::to_string(o.decontaminate_ngram), "expected 1..64");
  if (o.minhash.ngram < 1 || o.minhash.bands < 0 || o.minhash.rows < 0 || o.minhash.num_hashes < 1 ||
      o.minhash.memory_budget_mb < 1 || (o.minhash.bands == 0) != (o.minhash.rows == 0))
    return InvalidArgument(where + ": minhash.ngram, num_hashes and memory_budget_mb must be >= 1; bands and rows >= 1, or both 0",
                           "bands = 0 and rows = 0 choose them from minhash.threshold and minhash.num_hashes");
  if (o.minhash.threshold < 0 || o.minhash.threshold > 1)
    return InvalidArgument(where + ": minhash.threshold must be in [0, 1]");
  if (o.shard_bytes < 1) return InvalidArgument(where + ": output.shard_bytes must be >= 1");
  if (o.batch_docs < 1) return InvalidArgument(where + ": run.batch_docs must be >= 1");
  if (o.removed_samples_per_reason < 0) return InvalidArgument(where + ": output.removed_samples_per_reason must be >= 0");
  if (o.text_field.empty()) return InvalidArgument(where + ": input.text_field is empty");
  return Status::Ok();
}

}  // namespace

std::vector<KeyDoc> clean_keys() {
  CleanOptions o;
  std::vector<KeyDoc> out;
  for (const auto& b : bind(o)) out.push_back({b.key, type_of(b.target), std::visit(Printer{}, b.target), b.doc});
  return out;
}

StatusOr<CleanOptions> parse_clean_options(const std::string& text, const std::string& source) {
  CleanOptions o;
  toml::table t;
  try {
    t = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return InvalidArgument(msg.str(), "see https://toml.io for the syntax; keys look like `min_doc_words = 50` under `[gopher_quality]`");
  }
  LMT_RETURN_IF_ERROR(apply_table(bind(o), t, "", source));
  LMT_RETURN_IF_ERROR(validate(o, source));
  return o;
}

StatusOr<CleanOptions> load_clean_options(const std::string& path) {
  if (path.empty()) return CleanOptions{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open the clean config " + path, "check --config");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_clean_options(ss.str(), path);
}

StatusOr<CleanOptions> load_clean_options(const std::string& path, const std::vector<std::string>& overrides) {
  LMT_ASSIGN_OR_RETURN(CleanOptions o, load_clean_options(path));
  for (const std::string& a : overrides) {
    const std::string where = "--set " + a;
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      return InvalidArgument(where + ": not key=value", "e.g. --set gopher_quality.min_doc_words=20 (keys: docs/DATA_CLEAN.md)");
    const std::string key = a.substr(0, eq), value = a.substr(eq + 1);
    toml::table t;
    try {
      t = toml::parse(std::string_view(key + " = " + value), std::string_view("--set"));
    } catch (const toml::parse_error&) {
      // Not a TOML value (e.g. --set input.text_field=content): the text itself, as a string.
      try {
        toml::table s;
        s.insert("v", value);
        std::ostringstream quoted;
        quoted << s;  // v = 'content' (toml++ quotes and escapes it)
        t = toml::parse(std::string_view(key + quoted.str().substr(quoted.str().find(" = "))), std::string_view("--set"));
      } catch (const toml::parse_error& e) {
        return InvalidArgument(where + ": " + std::string(e.description()), "keys look like section.key, e.g. minhash.threshold=0.8");
      }
    }
    LMT_RETURN_IF_ERROR(apply_table(bind(o), t, "", where));
  }
  LMT_RETURN_IF_ERROR(validate(o, overrides.empty() ? path : "--set"));
  return o;
}

std::string options_fingerprint(const CleanOptions& o_in) {
  CleanOptions o = o_in;
  std::string s;
  for (const auto& b : bind(o)) s += b.key + "=" + std::visit(Printer{}, b.target) + "\n";
  return s;
}

}  // namespace lmt::clean
