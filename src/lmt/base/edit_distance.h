// Levenshtein distance, for "did you mean ...?" hints on unknown keys and names.
#pragma once

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

namespace lmt {

// Insertions, deletions and substitutions turning a into b. Quadratic: callers that take user input
// compare a bounded prefix (kEditDistancePrefix bytes), where a typo lies, so that a huge argument
// (a 1 MB `--set` key) costs nothing.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

inline constexpr size_t kEditDistancePrefix = 64;

}  // namespace lmt
