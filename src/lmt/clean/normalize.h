// Text normalisation before the filters, each step optional (docs/DATA_CLEAN.md):
//   control_chars  drops C0 controls other than \t \n \r, DEL, and C1 controls (U+0080..U+009F);
//   nfc            Unicode NFC through ICU (lmt/data/tokenizer/nfc.h);
//   whitespace     \r\n and \r become \n; spaces and tabs at line ends go; runs of spaces and tabs
//                  inside a line become one space; more than one blank line in a row becomes one;
//                  the document loses leading and trailing whitespace.
// Applied in that order. Invalid UTF-8 bytes pass through. Pure and thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace lmt::clean {

struct NormalizeOptions {
  bool nfc = true;
  bool whitespace = true;
  bool control_chars = true;
};

std::string normalize_text(std::string_view text, const NormalizeOptions& o);

}  // namespace lmt::clean
