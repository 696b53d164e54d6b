#include "lmt/clean/text.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "lmt/clean/punctuation_tables.h"

namespace lmt::clean {

U32 decode_utf8(std::string_view s) {
  U32 out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) { out.push_back(b); ++i; continue; }
    int len = 0;
    char32_t cp = 0, min = 0;
    if ((b & 0xE0) == 0xC0) { len = 2; cp = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3; cp = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4; cp = b & 0x07; min = 0x10000; }
    bool ok = len > 0 && i + static_cast<size_t>(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) { out.push_back(0xDC00 + b); ++i; continue; }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string encode_utf8(U32View s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) out.push_back(static_cast<char>(c));
    else if (c >= 0xDC80 && c <= 0xDCFF) out.push_back(static_cast<char>(c - 0xDC00));  // an escaped byte
    else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

bool py_isspace(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER: case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(char32_t c) {
  return std::binary_search(std::begin(tables::kPunctuation), std::end(tables::kPunctuation), c);
}

bool is_terminal_punctuation(char32_t c) {
  return std::binary_search(std::begin(tables::kTerminalPunctuation), std::end(tables::kTerminalPunctuation), c);
}

U32View py_lstrip(U32View s) {
  size_t a = 0;
  while (a < s.size() && py_isspace(s[a])) ++a;
  return s.substr(a);
}

U32View py_rstrip(U32View s) {
  size_t b = s.size();
  while (b > 0 && py_isspace(s[b - 1])) --b;
  return s.substr(0, b);
}

U32View py_strip(U32View s) { return py_rstrip(py_lstrip(s)); }

std::vector<U32View> py_split(U32View s) {
  std::vector<U32View> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && py_isspace(s[i])) ++i;
    const size_t a = i;
    while (i < s.size() && !py_isspace(s[i])) ++i;
    if (i > a) out.push_back(s.substr(a, i - a));
  }
  return out;
}

namespace {
bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}
}  // namespace

std::vector<U32View> py_splitlines(U32View s) {
  std::vector<U32View> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    if (!is_line_break(s[i])) { ++i; continue; }
    out.push_back(s.substr(start, i - start));
    i += (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::vector<U32View> split_on(U32View s, char32_t sep) {
  std::vector<U32View> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == sep) { out.push_back(s.substr(start, i - start)); start = i + 1; }
  out.push_back(s.substr(start));
  return out;
}

std::vector<U32View> split_runs(U32View s, char32_t c, size_t min_run) {
  std::vector<U32View> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    if (s[i] != c) { ++i; continue; }
    size_t j = i;
    while (j < s.size() && s[j] == c) ++j;
    if (j - i >= min_run) { out.push_back(s.substr(start, i - start)); start = j; }
    i = j;
  }
  out.push_back(s.substr(start));
  return out;
}

bool starts_with(U32View s, U32View p) { return s.size() >= p.size() && s.substr(0, p.size()) == p; }
bool ends_with(U32View s, U32View p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }

size_t count_of(U32View s, U32View needle) {
  if (needle.empty()) return s.size() + 1;
  size_t n = 0;
  for (size_t p = s.find(needle); p != U32View::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

U32 ascii_lower(U32View s) {
  U32 out(s);
  for (auto& c : out) if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
  return out;
}

// The word tokenizer: an approximation of spaCy's blank English tokenizer (datatrove 0.10.1's
// word tokenizer for "en"). Per whitespace-separated token, the rules that matter for the Gopher
// signals (how many words, which are punctuation):
//   - opening quotes and brackets ( " ` “ ‘ « ( [ { < ) at the start are words of their own;
//   - closing marks at the end ( " ' ” ’ » ) ] } > , ; : ! ? and "..." ) are words of their own;
//   - a final '.' is a word of its own unless the rest holds another '.' (U.S., e.g.);
//   - the clitics 's 'm 'd 'll 're 've n't (any case) at the end are words of their own;
//   - inside, ; # $ % & ? ! ( ) [ ] { } < > and "--" and "..." are words of their own, and so are
//     ',' between letters and ':' between a letter or digit and a letter (spaCy's infixes: 1,000,
//     10:30, a:1 and @,@ stay whole), and '-' between letters (e-mail -> e - mail). '@' is not split: spaCy keeps a@b.com and WikiText's @-@ @,@ @.@ whole.
// Not reproduced: spaCy's tokenizer exceptions (abbreviations such as "Mr." keep their '.'; here
// a final '.' is split unless the token holds another '.'), emoticons, URLs, and its other infixes.
namespace {

bool is_opening(char32_t c) {
  return c == '"' || c == '`' || c == 0x201C || c == 0x2018 || c == 0xAB || c == '(' || c == '[' || c == '{' || c == '<';
}
bool is_closing(char32_t c) {
  return c == '"' || c == '\'' || c == 0x201D || c == 0x2019 || c == 0xBB || c == ')' || c == ']' || c == '}' ||
         c == '>' || c == ',' || c == ';' || c == ':' || c == '!' || c == '?';
}
bool is_inner_split(char32_t c) {
  switch (c) {
    case ';': case '#': case '$': case '%': case '&': case '?': case '!':
    case '(': case ')': case '[': case ']': case '{': case '}': case '<': case '>':
      return true;
    default:
      return false;
  }
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
char32_t lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c; }

// The length of a clitic at the end of `t` (0 if none); something must precede it.
size_t clitic_length(U32View t) {
  auto ends_ci = [&](std::u32string_view suffix) {
    if (t.size() <= suffix.size()) return false;
    for (size_t i = 0; i < suffix.size(); ++i)
      if (lower(t[t.size() - suffix.size() + i]) != suffix[i]) return false;
    return true;
  };
  for (std::u32string_view c : {U"n't", U"'ll", U"'re", U"'ve", U"'s", U"'m", U"'d"})
    if (ends_ci(c)) return c.size();
  return 0;
}

void split_middle(U32View t, std::vector<U32View>* out) {
  size_t start = 0, i = 0;
  auto flush = [&](size_t end) { if (end > start) out->push_back(t.substr(start, end - start)); };
  while (i < t.size()) {
    size_t len = 0;
    if (is_inner_split(t[i])) len = 1;
    else if (t[i] == '-' && i + 1 < t.size() && t[i + 1] == '-') len = 2;
    else if (t[i] == '-' && i > 0 && i + 1 < t.size() && py_isalpha(t[i - 1]) && py_isalpha(t[i + 1])) len = 1;
    else if (t[i] == '.' && i + 2 < t.size() && t[i + 1] == '.' && t[i + 2] == '.') len = 3;
    else if (t[i] == ',' && i > 0 && i + 1 < t.size() && py_isalpha(t[i - 1]) && py_isalpha(t[i + 1])) len = 1;
    else if (t[i] == ':' && i > 0 && i + 1 < t.size() && (py_isalpha(t[i - 1]) || is_digit(t[i - 1])) && py_isalpha(t[i + 1]))
      len = 1;
    if (len == 0) { ++i; continue; }
    flush(i);
    out->push_back(t.substr(i, len));
    i += len;
    start = i;
  }
  flush(t.size());
}

}  // namespace

std::vector<U32View> split_words(U32View text) {
  std::vector<U32View> out;
  std::vector<U32View> tail;
  for (U32View t : py_split(text)) {
    while (!t.empty() && is_opening(t[0])) { out.push_back(t.substr(0, 1)); t.remove_prefix(1); }
    tail.clear();
    while (!t.empty()) {
      size_t len = 0;
      if (ends_with(t, U"...")) len = 3;
      else if (is_closing(t.back())) len = 1;
      else if (t.back() == '.' && t.substr(0, t.size() - 1).find('.') == U32View::npos) len = 1;
      else if (size_t c = clitic_length(t); c > 0) len = c;
      if (len == 0) break;
      tail.push_back(t.substr(t.size() - len));
      t.remove_suffix(len);
    }
    split_middle(t, &out);
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) out.push_back(*it);
  }
  return out;
}

}  // namespace lmt::clean
