// The softmax math of the attention kernels (kernels/cuda/attention.cu, attention_decode.cu), shared
// with the host so that tests/kernels/cuda/math_attention_test.cpp replays the kernels' exact tiled
// algorithm against the ref backend on machines without a GPU.
//
// Online softmax (FlashAttention): a row's scores arrive a block at a time; the state keeps the
// running max m and the running sum l = Σ exp(s - m). When a block raises the max, everything
// accumulated so far (l and the caller's output accumulators) is multiplied by exp(m_old - m_new).
// Masked scores are -inf and contribute exactly 0. A state that has seen only masked scores has
// m = -inf, l = 0, and every factor it hands out is 0 (never exp(-inf - -inf) = NaN).
//
// Also here: the attention mask, the head-dim buckets and the tile sizes of each kernel, so that the
// host replay tiles exactly as the kernels do.
#pragma once

#include <cmath>
#include <cstdint>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

// exp(x - m), and exactly 0 when x is -inf (a masked score, or an empty state's max), whatever m is.
LMT_HD float exp_shifted(float x, float m) { return x == -INFINITY ? 0.0f : expf(x - m); }

// Scale factors of a merge: new_acc = acc · self + other_acc · other.
struct MergeFactors {
  float self;
  float other;
};

struct OnlineSoftmax {
  float m = -INFINITY;  // running max of the scores seen (-inf: none visible yet)
  float l = 0.0f;       // running Σ exp(s - m)

  // Raises the max to cover a block whose max is block_max (-inf for an all-masked block); returns
  // the factor the caller must apply to its accumulators (l is rescaled here).
  LMT_HD float rescale(float block_max) {
    const float m_new = fmaxf(m, block_max);
    const float alpha = exp_shifted(m, m_new);
    l *= alpha;
    m = m_new;
    return alpha;
  }
  // The unnormalised probability of score s under the current max (call after rescale).
  LMT_HD float prob(float s) const { return exp_shifted(s, m); }
  // Adds a block's Σ prob(s), summed by the caller in its own order.
  LMT_HD void add(float prob_sum) { l += prob_sum; }
  // One score at a time (decode): rescale, then add its probability. Returns (alpha, p) through
  // the references so the caller can update acc = acc·alpha + p·v.
  LMT_HD void update(float s, float& alpha, float& p) {
    alpha = rescale(s);
    p = prob(s);
    l += p;
  }
  // Folds another partial state (e.g. another warp's keys) into this one.
  LMT_HD MergeFactors merge(const OnlineSoftmax& o) {
    const float m_new = fmaxf(m, o.m);
    const MergeFactors f{exp_shifted(m, m_new), exp_shifted(o.m, m_new)};
    l = l * f.self + o.l * f.other;
    m = m_new;
    return f;
  }
  // 1 / l, or 0 for a state with nothing visible (its accumulators are 0 too).
  LMT_HD float inv_sum() const { return l > 0.0f ? 1.0f / l : 0.0f; }
  // Natural-log log-sum-exp of the scores seen (-inf when none were visible).
  LMT_HD float lse() const { return l > 0.0f ? m + logf(l) : -INFINITY; }
};

// ---- backward --------------------------------------------------------------------------------
// P recomputed from the forward's log-sum-exp: exp(scaled_score - lse), 0 for a masked (-inf) score.
LMT_HD float attention_prob(float scaled_score, float lse) { return exp_shifted(scaled_score, lse); }
// dS = P ∘ (dP - D) with D_i = Σ_d dO_id · O_id (= Σ_j P_ij dP_ij).
LMT_HD float attention_dscore(float p, float dp, float d) { return p * (dp - d); }

// ---- mask ------------------------------------------------------------------------------------
// Key j is visible to query i (both < T for a real pair; padding rows i >= T of a tile see nothing)
// iff j <= i and, with documents, both lie in the same document.
LMT_HD bool attention_visible(int64_t i, int64_t j, int64_t T, bool has_docs, int32_t doc_i,
                              int32_t doc_j) {
  return i < T && j <= i && (!has_docs || doc_i == doc_j);
}

// ---- head-dim buckets and tiles ---------------------------------------------------------------
// The kernels are compiled for a maximum head dim (a bucket) and handle any HD <= bucket; 0 means
// HD is unsupported (> 256).
LMT_HD constexpr int attention_hd_bucket(int64_t hd) {
  return hd <= 0 ? 0 : hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : hd <= 256 ? 256 : 0;
}

// Tile sizes (multiples of 16: a block is 16×16 threads, each owning rows ty + 16r and columns
// tx + 16c). Chosen so every kernel's shared memory stays under 99 KB (the opt-in limit of sm_86/89;
// sm_80 and sm_90 allow more) while HD <= 64 keeps 64×64 tiles (about 88 KB at HD = 64).
struct AttentionTiles {
  int fwd_q, fwd_k;    // forward: query rows per block, keys per inner tile
  int dkv_k, dkv_q;    // backward dK/dV: key rows per block, queries per inner tile
  int dq_q, dq_k;      // backward dQ: query rows per block, keys per inner tile
};
LMT_HD constexpr AttentionTiles attention_tiles(int bucket) {
  return bucket <= 64    ? AttentionTiles{64, 64, 64, 64, 64, 64}
         : bucket <= 128 ? AttentionTiles{64, 32, 32, 32, 32, 32}
                         : AttentionTiles{32, 16, 16, 16, 16, 16};
}

// Row stride (floats) of a [rows, HD] tile in shared memory: HD rounded up to a multiple of 4 (the
// dot products read float4s; the extra columns hold zeros) and made an odd multiple of 4, so the 8
// threads of a float4 phase reading 8 consecutive rows hit 8 different groups of 4 banks.
LMT_HD constexpr int attention_tile_ld(int64_t hd) {
  const int hd4 = static_cast<int>((hd + 3) / 4 * 4);
  return (hd4 / 4) % 2 == 1 ? hd4 : hd4 + 4;
}
// Row stride of a [rows, n] tile of probabilities (or dS), n a multiple of 16: a multiple of 4 for
// float4 reads along a row, padded so the two rows a warp reads at once fall in different banks.
LMT_HD constexpr int attention_prob_ld(int n) { return n + 4; }

// Dynamic shared memory (bytes) of each kernel of attention.cu for a head dim hd of a bucket; the
// kernels carve their buffers in this order.
LMT_HD constexpr int64_t attention_forward_smem(int bucket, int64_t hd) {
  const AttentionTiles t = attention_tiles(bucket);
  const int64_t ld = attention_tile_ld(hd);
  // Q [fwd_q][ld], K and V [fwd_k][ld], P [fwd_q][prob_ld], key doc ids [fwd_k]
  return 4 * (t.fwd_q * ld + 2 * t.fwd_k * ld + int64_t(t.fwd_q) * attention_prob_ld(t.fwd_k) + t.fwd_k);
}
LMT_HD constexpr int64_t attention_dkv_smem(int bucket, int64_t hd) {
  const AttentionTiles t = attention_tiles(bucket);
  const int64_t ld = attention_tile_ld(hd);
  // K, V [dkv_k][ld], Q, dO [dkv_q][ld], Pᵀ then dSᵀ [dkv_k][prob_ld], lse, D, doc ids [dkv_q]
  return 4 * (2 * t.dkv_k * ld + 2 * t.dkv_q * ld + int64_t(t.dkv_k) * attention_prob_ld(t.dkv_q) + 3 * t.dkv_q);
}
LMT_HD constexpr int64_t attention_dq_smem(int bucket, int64_t hd) {
  const AttentionTiles t = attention_tiles(bucket);
  const int64_t ld = attention_tile_ld(hd);
  // Q, dO [dq_q][ld], K, V [dq_k][ld], dS [dq_q][prob_ld], key doc ids [dq_k]
  return 4 * (2 * t.dq_q * ld + 2 * t.dq_k * ld + int64_t(t.dq_q) * attention_prob_ld(t.dq_k) + t.dq_k);
}

}  // namespace lmt::kernels::cuda_math
