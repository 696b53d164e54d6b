// LayerNorm and RMSNorm, per element given the row's statistics, as kernels/cuda/norm.cu computes them
// (f32; the ref backend's f64 loops are the oracle within f32 rounding). RMSNorm is the same algebra
// with mean = 0, bias = 0 and no mean(dxhat) term.
//
// Row statistics (one warp per row in norm.cu: lane partial sums over columns lane, lane + 32, ...,
// then an xor-butterfly warp sum):
//   mean = Σx / C (layernorm),  rstd = 1 / sqrt(Σ(x - mean)² / C + eps)
// Forward:   y = (x - mean)·rstd·w + b
// Backward:  xhat = (x - mean)·rstd, dxhat = dy·w,
//            dx = rstd·(dxhat - mean(dxhat) - xhat·mean(dxhat·xhat))   (mean(dxhat) = 0 for rmsnorm)
//            dw[c] += Σ_n dy·xhat, db[c] += Σ_n dy  — column sums over row splits (norm_column_splits),
//            each split summed in row order, the splits then summed in split order: deterministic.
#pragma once

#include <cmath>
#include <cstdint>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

LMT_HD float norm_mean(float sum, int64_t C) { return sum / static_cast<float>(C); }

// rstd from the row's Σ(x - mean)² (Σx² for rmsnorm).
LMT_HD float norm_rstd(float sum_sq, int64_t C, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(C) + eps);
}

LMT_HD float norm_forward(float x, float mean, float rstd, float w, float b) { return (x - mean) * rstd * w + b; }

LMT_HD float norm_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }
LMT_HD float norm_dxhat(float dy, float w) { return dy * w; }

LMT_HD float norm_dinp(float xhat, float dxhat, float rstd, float mean_dxhat, float mean_dxhat_xhat) {
  return rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
}

// The column-sum tiling of backward's dweight/dbias: columns in tiles of kNormColTile, rows in
// `splits` contiguous ranges of rows_per_split, kNormColRows threads per tile column striding the
// rows of a split. A function of N and C only, so the summation order (and the bits) do not depend on
// the GPU; about 1024 blocks at most, and at least 64 rows per split so partials stay small.
inline constexpr int kNormColTile = 32;
inline constexpr int kNormColRows = 8;

struct NormColumnSplits {
  int64_t splits;
  int64_t rows_per_split;
};

LMT_HD NormColumnSplits norm_column_splits(int64_t N, int64_t C) {
  const int64_t tiles = (C + kNormColTile - 1) / kNormColTile;
  int64_t cap = 1024 / (tiles > 0 ? tiles : 1);
  if (cap < 1) cap = 1;
  int64_t splits = (N + 63) / 64;
  if (splits > cap) splits = cap;
  if (splits < 1) splits = 1;
  const int64_t rows = (N + splits - 1) / splits;
  return {splits, rows > 0 ? rows : 1};
}

}  // namespace lmt::kernels::cuda_math
