// Texts with exactly known word-5-gram Jaccard similarity, for the MinHash tests.
//
// Every word is a fresh token ("t" + a counter), so no shingle repeats inside or across texts. A pair
// shares a prefix of m words and has n own words after it: each text has m+n-4 shingles, m-4 shared,
// so J = (m-4) / (m+2n-4). planted_pair(J, union) picks m and n for union = m+2n-4 shingles.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/check.h"

namespace lmt::dedup::testing {

class TokenSource {
 public:
  std::string words(int64_t count) {
    std::string s;
    for (int64_t i = 0; i < count; ++i) {
      if (!s.empty()) s += ' ';
      s += "t" + std::to_string(next_++);
    }
    return s;
  }

 private:
  int64_t next_ = 0;
};

// Two texts whose 5-gram shingle sets have `shared` common shingles and `union_size` in all.
// (union_size + shared) must be even.
inline std::pair<std::string, std::string> planted_pair(TokenSource& tokens, int64_t shared, int64_t union_size) {
  LMT_CHECK((union_size + shared) % 2 == 0 && shared >= 1 && union_size >= shared);
  const int64_t m = shared + 4;                // words of the common prefix
  const int64_t n = (union_size - shared) / 2;  // own words of each text
  const std::string prefix = tokens.words(m);
  std::string a = prefix, b = prefix;
  if (n > 0) {
    a += " " + tokens.words(n);
    b += " " + tokens.words(n);
  }
  return {a, b};
}

}  // namespace lmt::dedup::testing
