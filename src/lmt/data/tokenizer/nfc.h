// Unicode Normalization Form C (canonical composition) of UTF-8 text, through ICU, for tokenizer.json
// files whose normalizer asks for it (Qwen2/Qwen3).
//
// Invalid UTF-8 bytes pass through unchanged (each valid run between them is normalised on its own),
// so any byte string is accepted. Thread-safe (ICU's NFC instance is immutable).
#pragma once

#include <string>
#include <string_view>

namespace lmt::data {

// The NFC form of `text`. Text without any byte >= 0xCC (every character below U+0300, where no
// character decomposes or combines) is returned as is without calling ICU.
std::string nfc_normalize(std::string_view text);

}  // namespace lmt::data
