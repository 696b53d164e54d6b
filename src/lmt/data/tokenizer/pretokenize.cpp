// PCRE2-backed pre-tokenisation. The pattern is compiled once with UTF + UCP (so \p{L}, \s and
// case folding follow Unicode, as tiktoken's fancy-regex and HF's Oniguruma do) and
// PCRE2_MATCH_INVALID_UTF, so invalid UTF-8 bytes simply never match instead of making PCRE2
// refuse the whole subject; split() then turns every unmatched gap into a piece of its own.
#include "lmt/data/tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace lmt::data {

struct Pretokenizer::Impl {
  std::string pattern;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

namespace {

// Match state that PCRE2 mutates during a match: one set per thread, shared by every pattern
// (the ovector only ever holds the whole match, whatever the pattern's group count).
struct ThreadMatchState {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ThreadMatchState() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // The default 32 KiB JIT stack is enough for the tokenizer patterns on ordinary text; a larger
    // one keeps pathological inputs (megabyte-long runs of one class) on the fast path.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    LMT_CHECK(match_data && context && jit_stack) << "PCRE2 allocation failed";
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

// Length of the UTF-8 character starting at s[i], or 1 for a byte that does not start a valid one.
size_t char_length(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

// PCRE2's \s under UCP also matches U+180E (MONGOLIAN VOWEL SEPARATOR), which Unicode 6.3 moved out
// of White_Space; tiktoken's Rust regex and HF's Oniguruma follow the current White_Space property.
// So \s (anywhere) and \S (outside a class) are spelled out as the White_Space set itself.
constexpr std::string_view kWhiteSpaceSet =
    R"(\t-\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string spell_out_white_space(std::string_view p) {
  std::string out;
  bool in_class = false, class_start = false;  // class_start: a ']' here is a literal, not the end
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      if (d == 'Q') {  // \Q...\E quotes everything up to \E
        const size_t e = p.find("\\E", i + 2);
        const size_t stop = e == std::string_view::npos ? p.size() : e + 2;
        out.append(p.substr(i, stop - i));
        i = stop;
      } else if (d == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
        i += 2;
      } else if (d == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
        i += 2;
      } else {  // any other escape (\S inside a class keeps PCRE2's meaning: rare, U+180E only)
        out.append(p.substr(i, 2));
        i += 2;
      }
      class_start = false;
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
        const size_t e = p.find(":]", i + 2);
        const size_t stop = e == std::string_view::npos ? p.size() : e + 2;
        out.append(p.substr(i, stop - i));
        i = stop;
        class_start = false;
        continue;
      }
      if (c == ']' && !class_start) in_class = false;
      class_start = false;
      out += c;
      ++i;
      continue;
    }
    out += c;
    ++i;
    if (c == '[') {
      in_class = class_start = true;
      if (i < p.size() && p[i] == '^') out += p[i++];
    }
  }
  return out;
}

}  // namespace

StatusOr<Pretokenizer> Pretokenizer::create(const std::string& pcre2_pattern) {
  auto impl = std::make_shared<Impl>();
  impl->pattern = pcre2_pattern;
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string compiled = spell_out_white_space(pcre2_pattern);
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (impl->code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    return InvalidArgument("pre-tokenisation regex does not compile at offset " + std::to_string(offset) +
                               ": " + reinterpret_cast<const char*>(buf) + " (pattern: " + pcre2_pattern + ")",
                           "the pattern must be PCRE2 syntax (Perl-style, \\p{..} classes)");
  }
  // JIT is an optimisation: a PCRE2 built without it still matches correctly through the interpreter.
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  return Pretokenizer(std::move(impl));
}

const std::string& Pretokenizer::pattern() const { return impl_->pattern; }

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  ThreadMatchState& st = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t done = 0;    // text[0, done) has been emitted
  size_t search = 0;  // where the next match attempt starts (> done after an empty match)
  while (done < n) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, n, search, 0, st.match_data, st.context)
                              : pcre2_match(impl_->code, subject, n, search, 0, st.match_data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // A resource limit (JIT stack, match limit) on a pathological input: emit one character on its
      // own and go on, so that the pieces still cover the text exactly.
      const size_t len = char_length(text, search);
      if (search > done) pieces->push_back(text.substr(done, search - done));
      pieces->push_back(text.substr(search, len));
      done = search = search + len;
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.match_data);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // empty matches carry no text: skip one character and search again
      if (begin >= n) break;
      search = begin + char_length(text, begin);
      continue;
    }
    if (begin > done) pieces->push_back(text.substr(done, begin - done));
    pieces->push_back(text.substr(begin, end - begin));
    done = search = end;
  }
  if (done < n) pieces->push_back(text.substr(done));
}

std::string_view gpt2_pattern() {
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

std::string_view cl100k_pattern() {
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

std::string_view o200k_pattern() {
  return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

}  // namespace lmt::data
