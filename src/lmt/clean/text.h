// Text primitives with Python's semantics, so the filters (filters.h) compute the same quantities as
// datatrove 0.10.1's Python code: texts are sequences of code points (len() counts code points),
// str.isspace / str.isalpha / str.strip / str.split / str.splitlines are reproduced, and the
// punctuation sets are datatrove's own (punctuation_tables.h).
//
// UTF-8 decoding never fails: an invalid byte b becomes the lone surrogate U+DC00+b (Python's
// "surrogateescape"), and encode_utf8() writes such a surrogate back as the byte, so
// encode_utf8(decode_utf8(s)) == s for every byte string s.
//
// split_words() approximates datatrove's English word tokenizer (spaCy's blank "en" tokenizer):
// see text.cpp for the rules kept and docs/DATA_CLEAN.md for the known differences. Everything here is pure and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lmt::clean {

using U32 = std::u32string;
using U32View = std::u32string_view;

U32 decode_utf8(std::string_view s);
std::string encode_utf8(U32View s);

bool py_isspace(char32_t c);      // str.isspace()
bool py_isalpha(char32_t c);      // str.isalpha(): general categories Lu Ll Lt Lm Lo (ICU)
bool is_punctuation(char32_t c);  // datatrove PUNCTUATION_SET
bool is_terminal_punctuation(char32_t c);  // datatrove TERMINAL_PUNCTUATION

U32View py_strip(U32View s);
U32View py_lstrip(U32View s);
U32View py_rstrip(U32View s);
// str.split() (runs of whitespace separate; no empty parts).
std::vector<U32View> py_split(U32View s);
// str.splitlines() (\n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029; no trailing empty line).
std::vector<U32View> py_splitlines(U32View s);
// s.split(sep) for a one-character separator (empty parts kept).
std::vector<U32View> split_on(U32View s, char32_t sep);
// re.split(pattern, s) for "c{min,}" (runs of at least `min_run` copies of c separate).
std::vector<U32View> split_runs(U32View s, char32_t c, size_t min_run);

bool starts_with(U32View s, U32View prefix);
bool ends_with(U32View s, U32View suffix);
size_t count_of(U32View s, U32View needle);  // str.count(): non-overlapping
// ASCII-lowercased copy (enough for the ASCII phrases the C4 rules look for).
U32 ascii_lower(U32View s);

// Words of a text, as views into it (see the header comment).
std::vector<U32View> split_words(U32View text);

}  // namespace lmt::clean
