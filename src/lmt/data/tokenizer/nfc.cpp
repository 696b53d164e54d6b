// ICU normalises UTF-16, so each valid UTF-8 run that may need it is converted there and back. The
// quick check skips that round trip for runs already in NFC (nearly all real text).
#include "lmt/data/tokenizer/nfc.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "lmt/base/check.h"

namespace lmt::data {
namespace {

// Length of the valid UTF-8 prefix of s (stops at the first invalid or truncated sequence).
size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (b < 0x80) { ++i; continue; }
    if ((b >> 5) == 0x6) { n = 2; cp = b & 0x1F; }
    else if ((b >> 4) == 0xE) { n = 3; cp = b & 0x0F; }
    else if ((b >> 3) == 0x1E) { n = 4; cp = b & 0x07; }
    else return i;
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += n;
  }
  return i;
}

void normalize_valid_run(const UNormalizer2* nfc, std::string_view run, std::string* out) {
  std::vector<UChar> u16(run.size() + 1);
  int32_t len16 = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8(u16.data(), static_cast<int32_t>(u16.size()), &len16, run.data(), static_cast<int32_t>(run.size()), &err);
  LMT_CHECK(U_SUCCESS(err)) << "u_strFromUTF8 on valid UTF-8: " << u_errorName(err);
  if (unorm2_quickCheck(nfc, u16.data(), len16, &err) == UNORM_YES && U_SUCCESS(err)) {
    out->append(run);
    return;
  }
  err = U_ZERO_ERROR;
  // NFC of UTF-16 text is at most 3x as long (Unicode's stated bound for composition forms).
  std::vector<UChar> norm(static_cast<size_t>(len16) * 3 + 1);
  const int32_t n = unorm2_normalize(nfc, u16.data(), len16, norm.data(), static_cast<int32_t>(norm.size()), &err);
  LMT_CHECK(U_SUCCESS(err)) << "unorm2_normalize: " << u_errorName(err);
  int32_t len8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &len8, norm.data(), n, &err);  // preflight for the size
  err = U_ZERO_ERROR;
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(len8));
  u_strToUTF8(out->data() + at, len8, &len8, norm.data(), n, &err);
  LMT_CHECK(U_SUCCESS(err) || err == U_STRING_NOT_TERMINATED_WARNING) << "u_strToUTF8: " << u_errorName(err);
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  bool may_change = false;
  for (char c : text) may_change = may_change || static_cast<unsigned char>(c) >= 0xCC;
  if (!may_change) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  LMT_CHECK(U_SUCCESS(err)) << "ICU NFC data missing: " << u_errorName(err);
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) normalize_valid_run(nfc, text.substr(0, valid), &out);
    if (valid < text.size()) out += text[valid];  // one invalid byte, as is
    text.remove_prefix(std::min(text.size(), valid + 1));
  }
  return out;
}

}  // namespace lmt::data
