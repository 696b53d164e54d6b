// learn_bpe_merges: hand-computed merges, overlap and tie rules, and the incremental pair counts
// checked against a trainer that recounts every pair before every merge.
#include "lmt/data/tokenizer/bpe_merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <utility>

namespace lmt::data {
namespace {

struct NamedMerge {
  std::string left, right;
  int64_t count;
  bool operator==(const NamedMerge& o) const { return left == o.left && right == o.right && count == o.count; }
};

std::ostream& operator<<(std::ostream& os, const NamedMerge& m) {
  return os << "(" << m.left << "," << m.right << ")x" << m.count;
}

std::vector<NamedMerge> named(const LearnedMerges& m) {
  std::vector<NamedMerge> out;
  for (const LearnedMerge& x : m.merges) out.push_back({m.tokens[x.left], m.tokens[x.right], x.count});
  return out;
}

// The obvious trainer: recount all pairs, take the most frequent (ties: smallest (left, right)
// bytes), merge it everywhere left to right, repeat.
std::vector<NamedMerge> naive_merges(const std::vector<PieceCount>& pieces, int64_t max_tokens) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const PieceCount& p : pieces) {
    std::vector<std::string> symbols;
    for (char c : p.bytes) symbols.emplace_back(1, c);
    words.push_back({symbols, p.count});
  }
  std::set<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.insert(std::string(1, static_cast<char>(b)));
  std::vector<NamedMerge> out;
  while (static_cast<int64_t>(tokens.size()) < max_tokens) {
    std::map<std::pair<std::string, std::string>, int64_t> counts;
    for (const auto& [symbols, count] : words)
      for (size_t i = 0; i + 1 < symbols.size(); ++i) counts[{symbols[i], symbols[i + 1]}] += count;
    const std::pair<std::string, std::string>* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [pair, count] : counts)  // ascending keys: the first maximum is the smallest
      if (count > best_count) best = &pair, best_count = count;
    if (best == nullptr) break;
    const auto [a, b] = *best;
    out.push_back({a, b, best_count});
    tokens.insert(a + b);
    for (auto& [symbols, count] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          merged.push_back(a + b);
          i += 2;
        } else {
          merged.push_back(symbols[i++]);
        }
      }
      symbols = std::move(merged);
    }
  }
  return out;
}

TEST(LearnBpeMerges, HandComputedCorpusGivesTheKnownMergesAndTieBreaks) {
  // Pair counts: (u,g) 20, (p,u) 17, (u,n) 16, (h,u) 15, (g,s) 5, (b,u) 4.
  const std::vector<PieceCount> pieces = {{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}};
  const LearnedMerges m = learn_bpe_merges(pieces, 1000);
  const std::vector<NamedMerge> expected = {
      {"u", "g", 20},   // 10 + 5 + 5
      {"u", "n", 16},   // (p,u) fell to 12 once "ug" took the u of "pug"
      {"h", "ug", 15},  //
      {"p", "un", 12},  //
      {"hug", "s", 5},  // ties with (p,ug) at 5: "hug" < "p"
      {"p", "ug", 5},   //
      {"b", "un", 4},
  };
  EXPECT_EQ(named(m), expected);
  ASSERT_EQ(m.tokens.size(), 256u + 7u);
  EXPECT_EQ(m.tokens[256], "ug");
  EXPECT_EQ(m.tokens[262], "bun");
  for (size_t r = 0; r < m.merges.size(); ++r) EXPECT_EQ(m.merges[r].result, static_cast<int32_t>(256 + r));
}

TEST(LearnBpeMerges, RunsMergeLeftToRightWithoutOverlap) {
  // "aaaaa": (a,a) occurs 4 times; merged left to right it gives aa aa a, whose pairs tie at 1 and
  // (aa, a) wins on its shorter right side; then aa aaa -> aaaaa.
  const LearnedMerges m = learn_bpe_merges(std::vector<PieceCount>{{"aaaaa", 3}}, 1000);
  const std::vector<NamedMerge> expected = {{"a", "a", 12}, {"aa", "a", 3}, {"aa", "aaa", 3}};
  EXPECT_EQ(named(m), expected);
}

TEST(LearnBpeMerges, StopsAtTheTokenBudget) {
  const std::vector<PieceCount> pieces = {{"hug", 10}, {"pug", 5}, {"pun", 12}, {"bun", 4}, {"hugs", 5}};
  const LearnedMerges m = learn_bpe_merges(pieces, 259);
  EXPECT_EQ(m.tokens.size(), 259u);
  EXPECT_EQ(m.merges.size(), 3u);
}

TEST(LearnBpeMerges, ResultDoesNotDependOnPieceOrder) {
  std::vector<PieceCount> pieces = {{"lower", 5}, {"lowest", 2}, {"newer", 6}, {"wider", 3}, {"new", 2}};
  const std::vector<NamedMerge> first = named(learn_bpe_merges(pieces, 1000));
  std::reverse(pieces.begin(), pieces.end());
  EXPECT_EQ(named(learn_bpe_merges(pieces, 1000)), first);
}

TEST(LearnBpeMerges, IncrementalCountsMatchARecountBeforeEveryMerge) {
  // Small alphabets make long runs, ties and repeated results likely: the paths where incremental
  // updates go wrong.
  for (int seed = 0; seed < 30; ++seed) {
    std::mt19937 rng(seed);
    const int alphabet = 2 + seed % 4;
    std::map<std::string, int64_t> corpus;
    for (int i = 0; i < 150; ++i) {
      std::string w(1 + rng() % 12, 'a');
      for (char& c : w) c = static_cast<char>('a' + rng() % alphabet);
      corpus[w] += 1 + rng() % 20;
    }
    std::vector<PieceCount> pieces;
    for (const auto& [w, c] : corpus) pieces.push_back({w, c});
    const LearnedMerges m = learn_bpe_merges(pieces, 256 + 120);
    ASSERT_EQ(named(m), naive_merges(pieces, 256 + 120)) << "seed " << seed;
    const std::set<std::string> distinct(m.tokens.begin(), m.tokens.end());
    EXPECT_EQ(distinct.size(), m.tokens.size()) << "seed " << seed;
  }
}

TEST(LearnBpeMerges, ProgressReachesTheEnd) {
  int64_t last = 0, calls = 0;
  learn_bpe_merges(std::vector<PieceCount>{{"hug", 10}, {"pug", 5}}, 300, [&](int64_t done, int64_t total) {
    EXPECT_EQ(total, 300);
    last = done;
    ++calls;
  });
  EXPECT_GE(calls, 1);
  EXPECT_EQ(last, 256 + 3);  // (u,g), (h,ug), (p,ug): then both pieces are single tokens
}

}  // namespace
}  // namespace lmt::data
