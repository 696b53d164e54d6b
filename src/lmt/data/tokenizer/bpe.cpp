// Both merge loops pick the same pair at every step: the global minimum of (rank, position) among
// adjacent pairs that have a merge. The small one recomputes only the two pairs a merge touches;
// the large one keeps candidates in a heap and drops stale ones when they surface (HF's scheme).
#include "lmt/data/tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

namespace lmt::data {
namespace {

// Pieces up to this many symbols merge in stack arrays with a linear scan; tiktoken's measurements
// put the crossover to a heap in the hundreds, ordinary words are far below it.
constexpr size_t kSmallPiece = 128;

// Length of the UTF-8 character at s[i]; an invalid or truncated sequence counts as one byte.
size_t utf8_char_length(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t cp;
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) { n = 2; cp = b & 0x1F; }
  else if ((b >> 4) == 0xE) { n = 3; cp = b & 0x0F; }
  else if ((b >> 3) == 0x1E) { n = 4; cp = b & 0x07; }
  else return 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 1;
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not characters.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 1;
  return n;
}

std::string byte_fallback_name(int b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

}  // namespace

StatusOr<BpeModel> BpeModel::create(const std::vector<std::optional<std::string>>& tokens,
                                    const std::vector<BpeMerge>& merges, const BpeOptions& options,
                                    const std::string& source) {
  BpeModel m;
  m.options_ = options;
  const auto n_ids = static_cast<int64_t>(tokens.size());
  m.token_ids_.reserve(tokens.size());
  for (int64_t id = 0; id < n_ids; ++id)
    if (tokens[id]) m.token_ids_.insert(*tokens[id], static_cast<int32_t>(id));

  auto valid = [&](int32_t id) { return id >= 0 && id < n_ids && tokens[id].has_value(); };
  m.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const BpeMerge& g = merges[i];
    if (!valid(g.left) || !valid(g.right) || !valid(g.merged))
      return InvalidArgument(source + ": merge #" + std::to_string(i) + " refers to a token id that does not exist");
    m.merges_.insert(g.left, g.right, {g.rank, g.merged});
  }

  if (options.symbols == BpeOptions::Symbols::kBytes) {
    for (int b = 0; b < 256; ++b) {
      m.byte_ids_[b] = m.token_ids_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
      if (m.byte_ids_[b] < 0)
        return InvalidArgument(source + ": the vocabulary has no token for the byte 0x" + byte_fallback_name(b).substr(3, 2),
                               "a byte-level BPE vocabulary needs all 256 single-byte tokens");
    }
  } else {
    bool all_bytes = true;
    for (int b = 0; b < 256; ++b) {
      m.byte_ids_[b] = options.byte_fallback ? m.token_ids_.find(byte_fallback_name(b)) : -1;
      all_bytes = all_bytes && m.byte_ids_[b] >= 0;
    }
    if (options.unk_id && !valid(*options.unk_id))
      return InvalidArgument(source + ": the unknown token id " + std::to_string(*options.unk_id) + " is not in the vocabulary");
    if (!options.unk_id && !(options.byte_fallback && all_bytes))
      return Unimplemented(source + ": the model has no unk_token and no complete byte_fallback (<0x00>..<0xFF>), "
                           "so text outside its vocabulary could not be encoded",
                           "set model.unk_token, or byte_fallback with all 256 <0xXX> tokens");
  }

  if (options.symbols == BpeOptions::Symbols::kUtf8Chars) {
    for (const auto& t : tokens) {
      if (!t) continue;
      for (size_t i = 0, prev = 0; i < t->size(); prev = i, i += utf8_char_length(*t, i))
        if (i > 0) m.junctions_.insert(std::string_view(*t).substr(prev, i - prev + utf8_char_length(*t, i)), 0);
    }
  }

  // Whole-piece lookups: every token (tiktoken's rule, HF ignore_merges), or only the tokens that
  // merging their own symbols rebuilds, so the shortcut never changes a result.
  m.whole_ids_.reserve(tokens.size());
  std::vector<int32_t> ids;
  for (int64_t id = 0; id < n_ids; ++id) {
    if (!tokens[id]) continue;
    if (!options.whole_piece_lookup) {
      ids.clear();
      m.encode_piece(*tokens[id], &ids);
      if (ids.size() != 1 || ids[0] != id) continue;
    }
    m.whole_ids_.insert(*tokens[id], static_cast<int32_t>(id));
  }
  return m;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>* symbols) const {
  if (options_.symbols == BpeOptions::Symbols::kBytes) {
    for (char c : piece) symbols->push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return;
  }
  int32_t pending_unk = -1;  // an unknown token not yet emitted (fuse_unk may extend it)
  for (size_t i = 0; i < piece.size();) {
    const size_t len = utf8_char_length(piece, i);
    const std::string_view ch = piece.substr(i, len);
    i += len;
    const int32_t id = token_ids_.find(ch);
    if (id >= 0) {
      if (pending_unk >= 0) symbols->push_back(pending_unk);
      pending_unk = -1;
      symbols->push_back(id);
      continue;
    }
    bool have_bytes = options_.byte_fallback;
    for (char c : ch) have_bytes = have_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (have_bytes) {
      if (pending_unk >= 0) symbols->push_back(pending_unk);
      pending_unk = -1;
      for (char c : ch) symbols->push_back(byte_ids_[static_cast<uint8_t>(c)]);
      continue;
    }
    // create() guarantees an unknown token here.
    if (pending_unk >= 0 && !options_.fuse_unk) symbols->push_back(pending_unk);
    pending_unk = *options_.unk_id;
  }
  if (pending_unk >= 0) symbols->push_back(pending_unk);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  // Cutting would skip the whole-piece lookup that ignore_merges defines for the uncut piece.
  if (options_.symbols != BpeOptions::Symbols::kUtf8Chars || piece.size() <= kSmallPiece ||
      options_.whole_piece_lookup) {
    encode_unit(piece, out);
    return;
  }
  size_t start = 0, prev = 0;
  for (size_t i = utf8_char_length(piece, 0); i < piece.size(); prev = i, i += utf8_char_length(piece, i)) {
    const size_t len = utf8_char_length(piece, i);
    if (junctions_.find(piece.substr(prev, i - prev + len)) >= 0) continue;
    if (token_ids_.find(piece.substr(prev, i - prev)) < 0 || token_ids_.find(piece.substr(i, len)) < 0) continue;
    encode_unit(piece.substr(start, i - start), out);
    start = i;
  }
  encode_unit(piece.substr(start), out);
}

void BpeModel::encode_unit(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (options_.symbols == BpeOptions::Symbols::kBytes && piece.size() == 1) {
    out->push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const int32_t whole = whole_ids_.find(piece);
  if (whole >= 0) {
    out->push_back(whole);
    return;
  }
  if (options_.symbols == BpeOptions::Symbols::kBytes && piece.size() <= kSmallPiece) {
    int32_t ids[kSmallPiece];
    for (size_t i = 0; i < piece.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
    merge_small(ids, piece.size(), out);
    return;
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  initial_symbols(piece, &symbols);
  if (symbols.size() <= kSmallPiece) merge_small(symbols.data(), symbols.size(), out);
  else merge_large(symbols.data(), symbols.size(), out);
}

void BpeModel::merge_small(int32_t* ids, size_t n, std::vector<int32_t>* out) const {
  // rank[i], merged[i]: the merge of the pair (ids[i], ids[i+1]); INT_MAX when there is none.
  int32_t rank[kSmallPiece], merged[kSmallPiece];
  auto look = [&](size_t i) {
    const PairMergeMap::Merge g = merges_.find(ids[i], ids[i + 1]);
    rank[i] = g.rank < 0 ? INT_MAX : g.rank;
    merged[i] = g.merged;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT_MAX) break;
    ids[best] = merged[best];
    // Drop symbol best+1 and the pair (best, best+1).
    std::copy(ids + best + 2, ids + n, ids + best + 1);
    std::copy(rank + best + 1, rank + n - 1, rank + best);
    std::copy(merged + best + 1, merged + n - 1, merged + best);
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  out->insert(out->end(), ids, ids + n);
}

void BpeModel::merge_large(const int32_t* ids, size_t n, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id, prev, next;  // id -1: merged into its left neighbour
  };
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> sym(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {ids[i], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    const PairMergeMap::Merge g = merges_.find(sym[pos].id, sym[next].id);
    if (g.rank >= 0) heap.push({g.rank, pos, g.merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (left.id < 0 || left.next < 0) continue;
    const PairMergeMap::Merge g = merges_.find(left.id, sym[left.next].id);
    if (g.rank != c.rank || g.merged != c.merged) continue;  // stale: a neighbour changed
    Symbol& right = sym[left.next];
    left.id = c.merged;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = c.pos;
    right.id = -1;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace lmt::data
