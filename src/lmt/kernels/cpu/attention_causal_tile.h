// Which products of one flash-attention tile causality leaves visible (attention.cpp, f32 and
// bf16 alike). A tile pairs query rows i0 + r with keys j0 + c; query i sees key j only when j ≤ i,
// so row r sees column c only when c ≤ r + diag, diag = i0 − j0. On a tile that the diagonal
// crosses (0 ≤ diag < the tile's width), the products of the hidden pairs are exact zeros (their
// probabilities are e^−inf), and skipping them changes no result: a block of rows [r0, r0 + 4)
// needs only the keys before keys_end(r0), and a block of key rows [c0, c0 + 4) only the queries
// from queries_begin(c0). Tiles below the diagonal (diag ≥ the width) trim nothing. With document
// masks some visible pairs are masked too; those stay computed (the mask handles them).
//
// About 45% of a diagonal tile's products are skipped; at T = 256 with 64-wide tiles, 4 of a
// (batch, head)'s 10 tiles are diagonal.
// Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lmt::kernels::cpu_attention {

inline constexpr int kRowBlock = 4;  // rows per register block of the micro-kernels

// A range [begin, end) of a product's inner dimension, in its steps (keys, queries, or bf16 pairs).
struct InnerSpan {
  int64_t begin, end;
};

struct CausalTile {
  int64_t diag;  // i0 − j0

  // Keys [0, keys_end) that some row of the block [r0, r0 + kRowBlock) sees.
  int64_t keys_end(int64_t r0) const { return diag + r0 + kRowBlock; }
  // Queries [queries_begin, …) that see some key of the block [c0, c0 + kRowBlock).
  int64_t queries_begin(int64_t c0) const { return std::max<int64_t>(0, c0 - diag); }

  // The inner span of a product whose rows are queries and whose inner dimension is `inner` steps of
  // `per` keys each (P·V, dS·K): the keys the block sees.
  InnerSpan keys_for_queries(int64_t r0, int64_t inner, int64_t per) const {
    return {0, std::clamp<int64_t>((keys_end(r0) + per - 1) / per, 0, inner)};
  }
  // The inner span of a product whose rows are keys and whose inner dimension is `inner` steps of
  // `per` queries each (Pᵀ·dO, dSᵀ·Q): the queries that see the block.
  InnerSpan queries_for_keys(int64_t c0, int64_t inner, int64_t per) const {
    return {std::min<int64_t>(queries_begin(c0) / per, inner), inner};
  }
  // Vectors of `lanes` keys, of `vecs` in a row, that query row r sees: [0, key_vecs), at least one
  // (every row of a visited tile sees its first key: diag >= 0).
  int key_vecs(int64_t r, int vecs, int lanes) const {
    return static_cast<int>(std::clamp<int64_t>((diag + r) / lanes + 1, 1, vecs));
  }
};

}  // namespace lmt::kernels::cpu_attention
