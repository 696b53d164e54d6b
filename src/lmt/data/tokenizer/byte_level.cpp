// The table is OpenAI's bytes_to_unicode() from gpt-2/src/encoder.py, computed rather than listed.
#include "lmt/data/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

namespace lmt::data {
namespace {

struct ByteLevelTables {
  std::array<uint32_t, 256> byte_to_char{};
  std::array<int16_t, 324> char_to_byte{};  // code points < 324 (the largest is U+0143)
  ByteLevelTables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      byte_to_char[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const ByteLevelTables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    const uint32_t cp = t.byte_to_char[static_cast<uint8_t>(c)];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {  // all code points are < 0x800: two UTF-8 bytes
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

bool byte_level_decode(std::string_view text, std::string* bytes) {
  const ByteLevelTables& t = tables();
  bytes->clear();
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    uint32_t cp;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 >> 5) == 0x6 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
      i += 2;
      if (cp < 0x80) return false;  // overlong encoding
    } else {
      return false;  // three- and four-byte characters are all outside the alphabet
    }
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) return false;
    *bytes += static_cast<char>(t.char_to_byte[cp]);
  }
  return true;
}

}  // namespace lmt::data
