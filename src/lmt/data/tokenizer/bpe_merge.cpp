// The BPE merge loop. Pieces are stored flat (one int32 token id per symbol); a merge rewrites a
// piece in place (it only ever gets shorter) and reports the pair-count deltas of the symbols around
// each occurrence, which is all that changes.
#include "lmt/data/tokenizer/bpe_merge.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "lmt/base/check.h"

namespace lmt::data {
namespace {

using PairKey = uint64_t;  // (left id << 32) | right id

PairKey pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t key_left(PairKey k) { return static_cast<int32_t>(k >> 32); }
int32_t key_right(PairKey k) { return static_cast<int32_t>(k & 0xffffffffu); }

// std::hash<uint64_t> is the identity; the low bits of a key are the right id only, which would
// crowd pairs that share a right token into few buckets.
struct PairKeyHash {
  size_t operator()(PairKey k) const {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
};

struct PairStats {
  int64_t count = 0;
  // Pieces where the pair occurs. Entries can go stale (the piece no longer has the pair) and can
  // repeat; merging a stale piece is a no-op, so neither costs correctness.
  std::vector<int32_t> pieces;
};

struct HeapEntry {
  int64_t count;
  PairKey key;
};

class MergeLoop {
 public:
  MergeLoop(std::span<const PieceCount> pieces, LearnedMerges* out) : out_(out) {
    out_->tokens.clear();
    out_->merges.clear();
    for (int b = 0; b < 256; ++b) {
      out_->tokens.emplace_back(1, static_cast<char>(b));
      token_ids_.emplace(out_->tokens.back(), b);
    }
    for (const PieceCount& p : pieces) {
      LMT_CHECK_GE(p.count, 1) << "piece counts are occurrences";
      if (p.bytes.size() < 2) continue;  // no pair: cannot take part in any merge
      LMT_CHECK_LT(pieces_.size(), static_cast<size_t>(std::numeric_limits<int32_t>::max()));
      LMT_CHECK_LT(p.bytes.size(), static_cast<size_t>(std::numeric_limits<uint32_t>::max()));
      pieces_.push_back({symbols_.size(), static_cast<uint32_t>(p.bytes.size()), p.count});
      for (char c : p.bytes) symbols_.push_back(static_cast<unsigned char>(c));
    }
    for (size_t w = 0; w < pieces_.size(); ++w) {
      const Piece& p = pieces_[w];
      for (uint32_t i = 0; i + 1 < p.len; ++i)
        add(symbols_[p.begin + i], symbols_[p.begin + i + 1], p.count, static_cast<int32_t>(w));
    }
    grown_.clear();
    heap_.reserve(pairs_.size());
    for (const auto& [key, stats] : pairs_) heap_.push_back({stats.count, key});
    std::make_heap(heap_.begin(), heap_.end(), lower_priority());
  }

  // Performs the next merge; false when no pair is left.
  bool step() {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), lower_priority());
      const HeapEntry top = heap_.back();
      heap_.pop_back();
      auto it = pairs_.find(top.key);
      if (it == pairs_.end()) continue;  // the pair died (count 0) after this entry was queued
      const int64_t current = it->second.count;
      if (current != top.count) {
        // Lower: the pair lost occurrences since; re-queue at its true count. Higher: it gained
        // some, and every gain queued a fresh entry, so this one is a leftover.
        if (current < top.count) push(top.key, current);
        continue;
      }
      merge(top.key, current, std::move(it->second.pieces));
      return true;
    }
    return false;
  }

 private:
  struct Piece {
    size_t begin;   // into symbols_
    uint32_t len;   // current number of symbols
    int64_t count;  // occurrences in the corpus
  };

  // Heap order: higher count first; among equal counts the smaller (left bytes, right bytes).
  struct LowerPriority {
    const std::vector<std::string>* tokens;
    bool operator()(const HeapEntry& x, const HeapEntry& y) const {
      if (x.count != y.count) return x.count < y.count;
      const std::vector<std::string>& t = *tokens;
      const int c = t[key_left(x.key)].compare(t[key_left(y.key)]);
      if (c != 0) return c > 0;
      return t[key_right(x.key)].compare(t[key_right(y.key)]) > 0;
    }
  };
  LowerPriority lower_priority() const { return LowerPriority{&out_->tokens}; }

  void push(PairKey key, int64_t count) {
    heap_.push_back({count, key});
    std::push_heap(heap_.begin(), heap_.end(), lower_priority());
  }

  void add(int32_t left, int32_t right, int64_t count, int32_t piece) {
    const PairKey key = pair_key(left, right);
    PairStats& s = pairs_[key];
    s.count += count;
    if (s.pieces.empty() || s.pieces.back() != piece) s.pieces.push_back(piece);
    grown_.push_back(key);
  }

  void remove(int32_t left, int32_t right, int64_t count) {
    auto it = pairs_.find(pair_key(left, right));
    LMT_CHECK(it != pairs_.end()) << "pair counts out of sync with the pieces";
    it->second.count -= count;
    LMT_CHECK_GE(it->second.count, 0);
    // No piece holds the pair any more (counts are exact), so its piece list is garbage.
    if (it->second.count == 0) pairs_.erase(it);
  }

  void merge(PairKey key, int64_t count, std::vector<int32_t> pieces) {
    const int32_t a = key_left(key), b = key_right(key);
    std::string bytes = out_->tokens[a] + out_->tokens[b];
    int32_t result;
    if (auto found = token_ids_.find(bytes); found != token_ids_.end()) {
      result = found->second;  // same bytes as an earlier token: reuse its id (see header)
    } else {
      result = static_cast<int32_t>(out_->tokens.size());
      token_ids_.emplace(bytes, result);
      out_->tokens.push_back(std::move(bytes));
    }
    out_->merges.push_back({a, b, result, count});

    std::sort(pieces.begin(), pieces.end());
    pieces.erase(std::unique(pieces.begin(), pieces.end()), pieces.end());
    grown_.clear();
    for (int32_t w : pieces) merge_in_piece(w, key, result);
    pairs_.erase(key);  // every occurrence is merged now

    std::sort(grown_.begin(), grown_.end());
    grown_.erase(std::unique(grown_.begin(), grown_.end()), grown_.end());
    for (PairKey k : grown_)
      if (auto it = pairs_.find(k); it != pairs_.end() && it->second.count > 0) push(k, it->second.count);
  }

  // Rewrites piece w with every (a, b) left to right replaced by `merged`, and moves the counts of
  // the neighbouring pairs: x a b y becomes x M y, so (x,a) and (b,y) lose, (x,M) and (M,y) gain.
  void merge_in_piece(int32_t w, PairKey key, int32_t merged) {
    const int32_t a = key_left(key), b = key_right(key);
    Piece& p = pieces_[w];
    int32_t* s = symbols_.data() + p.begin;
    const uint32_t n = p.len;
    uint32_t out = 0, r = 0;
    while (r < n) {
      if (r + 1 < n && s[r] == a && s[r + 1] == b) {
        // s[out - 1] is already rewritten: after an adjacent occurrence it is `merged`, and the
        // previous step recorded the pair (merged, a) that this one now takes back.
        if (out > 0) {
          remove(s[out - 1], a, p.count);
          add(s[out - 1], merged, p.count, w);
        }
        if (r + 2 < n) {
          // (b, y) is the merged pair itself only in a run like "a a a"; that pair is dropped whole
          // once every piece is rewritten, so its count needs no update here.
          if (pair_key(b, s[r + 2]) != key) remove(b, s[r + 2], p.count);
          add(merged, s[r + 2], p.count, w);
        }
        s[out++] = merged;
        r += 2;
      } else {
        s[out++] = s[r++];
      }
    }
    p.len = out;
  }

  LearnedMerges* out_;
  std::vector<int32_t> symbols_;
  std::vector<Piece> pieces_;
  std::unordered_map<PairKey, PairStats, PairKeyHash> pairs_;
  std::unordered_map<std::string, int32_t> token_ids_;
  std::vector<HeapEntry> heap_;
  std::vector<PairKey> grown_;  // pairs whose count rose during the current merge
};

}  // namespace

LearnedMerges learn_bpe_merges(std::span<const PieceCount> pieces, int64_t max_tokens,
                           const std::function<void(int64_t, int64_t)>& progress) {
  LMT_CHECK_GE(max_tokens, 256) << "the 256 byte tokens are always in the vocabulary";
  LearnedMerges out;
  MergeLoop loop(pieces, &out);
  int64_t steps = 0;
  while (static_cast<int64_t>(out.tokens.size()) < max_tokens && loop.step()) {
    if (progress && ++steps % 64 == 0) progress(static_cast<int64_t>(out.tokens.size()), max_tokens);
  }
  if (progress) progress(static_cast<int64_t>(out.tokens.size()), max_tokens);
  return out;
}

}  // namespace lmt::data
