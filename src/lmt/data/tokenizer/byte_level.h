// GPT-2's byte-level alphabet: every byte 0..255 is given a printable Unicode character, so that a
// vocabulary of byte strings can be stored as text (encoder.json, tokenizer.json "Ġthe" = " the").
// Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100.. in byte order.
//
// Pure functions over immutable tables; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace lmt::data {

// The UTF-8 text of `bytes` in the byte-level alphabet ("\x20the" -> "Ġthe").
std::string byte_level_encode(std::string_view bytes);

// The bytes behind byte-level text ("Ġthe" -> " the"). False (and *bytes unspecified) when `text`
// holds a character outside the 256-character alphabet or is not valid UTF-8.
bool byte_level_decode(std::string_view text, std::string* bytes);

}  // namespace lmt::data
