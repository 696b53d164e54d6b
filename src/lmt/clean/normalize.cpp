#include "lmt/clean/normalize.h"

#include "lmt/data/tokenizer/nfc.h"

namespace lmt::clean {
namespace {

std::string drop_control_chars(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) continue;
    if (c == 0xC2 && i + 1 < s.size()) {  // U+0080..U+009F
      const auto d = static_cast<unsigned char>(s[i + 1]);
      if (d >= 0x80 && d <= 0x9F) { ++i; continue; }
    }
    out.push_back(static_cast<char>(c));
  }
  return out;
}

std::string clean_whitespace(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::string pending_space;  // spaces/tabs not yet known to be inside a line
  int newlines = 0;           // newlines since the last text
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      c = '\n';
    }
    if (c == '\n') { pending_space.clear(); ++newlines; continue; }
    if (c == ' ' || c == '\t') { pending_space = " "; continue; }
    if (!out.empty()) {
      if (newlines > 0) out.append(newlines >= 2 ? "\n\n" : "\n");
      else out += pending_space;
    }
    pending_space.clear();
    newlines = 0;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string normalize_text(std::string_view text, const NormalizeOptions& o) {
  std::string s(text);
  if (o.control_chars) s = drop_control_chars(s);
  if (o.nfc) s = data::nfc_normalize(s);
  if (o.whitespace) s = clean_whitespace(s);
  return s;
}

}  // namespace lmt::clean
