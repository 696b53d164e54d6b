// LayerNorm and RMSNorm, forward and backward, and the forwards fused with the residual add before
// them (kernels/backend.h): inp, dout, dinp f32 [N,C]; out f32 or bf16 [N,C];
// weight, bias, dweight, dbias f32 [C]; mean, rstd f32 [N]. dweight/dbias accumulate (+=); dinp is
// overwritten, or accumulated when `accumulate`; bias/dbias are optional. The per-element math is
// math/norm_math.h (the host test runs it against the ref backend).
//
// Row kernels: one warp per row, kRowWarps rows per block, a grid-stride loop over rows (any N). Where
// C % 4 == 0 and the rows are 16-byte aligned (forward up to C = 4096, backward up to 2048), float4
// kernels hold the whole row in registers. Otherwise (the general path) each lane caches its columns
// lane + 32·j, j < K, in registers (K from C, at most 32, so C <= 1024 is read from memory once);
// columns beyond 32·K are re-read from global memory (L1/L2) in each pass, which keeps one code path
// correct for any C. Statistics are f32 two-pass (mean, then Σ(x - mean)²).
// Backward recomputes the mean from inp (as the ref and cpu backends do) and takes rstd as given.
//
// Column sums (dweight, dbias): no float atomics. A second kernel tiles [N,C] into 32-column tiles and
// row splits (norm_column_splits: a function of N and C only); each block sums its split in a fixed
// order into partials[split, C] in scratch, and a third kernel adds Σ_split partials (in split order)
// into dweight/dbias. Same inputs, same bits, on any GPU. It re-reads dout and inp once more.
//
// Scratch (one ctx.scratch call per backward): mean [N] (layernorm) + partials 1-2 × [splits, C],
// splits·C <= ~1024·32 + C floats: a few hundred KB at most.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/math/norm_math.h"
#include "lmt/kernels/cuda/ops.h"

namespace lmt::kernels::cuda {
namespace {

namespace cm = lmt::kernels::cuda_math;

constexpr int kRowWarps = 4;
constexpr int kRowThreads = 32 * kRowWarps;

// Calls f(std::integral_constant<int, K>) with the register-cache width for C columns.
template <typename F>
void with_cache_width(int64_t C, F&& f) {
  if (C <= 32)
    f(std::integral_constant<int, 1>{});
  else if (C <= 64)
    f(std::integral_constant<int, 2>{});
  else if (C <= 128)
    f(std::integral_constant<int, 4>{});
  else if (C <= 256)
    f(std::integral_constant<int, 8>{});
  else if (C <= 512)
    f(std::integral_constant<int, 16>{});
  else
    f(std::integral_constant<int, 32>{});
}

unsigned row_blocks(int64_t N) { return blocks_for(N, kRowWarps); }

// The residual add before a norm (add_*norm_forward): with kAdd the row is first written as
// x[c] = a[c] + b[c] (one f32 rounding, as add()) and normalised from those values, which is what
// the plain kernel reads back from x: the same bits as add() then the norm.
struct AddInputs {
  const float* a = nullptr;
  const float* b = nullptr;
};

// kCentered: layernorm (mean subtracted, bias allowed); else rmsnorm. mean_out and bias may be null.
// OutT float or uint16_t (bf16, rounded like convert()).
template <int K, bool kCentered, bool kAdd, typename OutT>
__global__ void __launch_bounds__(kRowThreads)
    norm_forward_kernel(OutT* out, float* mean_out, float* rstd_out, float* inp, AddInputs add, const float* weight,
                        const float* bias, int64_t N, int C, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5); row < N; row += stride) {
    float* x = inp + row * C;
    float v[K];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + 32 * j;
      if constexpr (kAdd) {
        v[j] = c < C ? add.a[row * C + c] + add.b[row * C + c] : 0.0f;
        if (c < C) x[c] = v[j];
      } else {
        v[j] = c < C ? x[c] : 0.0f;
      }
      if (c < C) sum += v[j];
    }
    if constexpr (kAdd)  // the columns past the register cache: written here, re-read below (same lane)
      for (int c = lane + 32 * K; c < C; c += 32) x[c] = add.a[row * C + c] + add.b[row * C + c];
    float mean = 0.0f;
    if constexpr (kCentered) {
      for (int c = lane + 32 * K; c < C; c += 32) sum += x[c];
      mean = cm::norm_mean(warp_sum(sum), C);
    }
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + 32 * j;
      const float d = v[j] - mean;
      if (c < C) sq += d * d;
    }
    for (int c = lane + 32 * K; c < C; c += 32) {
      const float d = x[c] - mean;
      sq += d * d;
    }
    const float rstd = cm::norm_rstd(warp_sum(sq), C, eps);
    OutT* y = out + row * C;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + 32 * j;
      if (c < C) store_f(y, c, cm::norm_forward(v[j], mean, rstd, weight[c], bias != nullptr ? bias[c] : 0.0f));
    }
    for (int c = lane + 32 * K; c < C; c += 32)
      store_f(y, c, cm::norm_forward(x[c], mean, rstd, weight[c], bias != nullptr ? bias[c] : 0.0f));
    if (lane == 0) {
      if (mean_out != nullptr) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// ---- float4 row kernels: C % 4 == 0 and 16-byte aligned rows (every model width) -----------------
// The same math and one warp per row, but each lane holds float4s lane + 32·j, j < K4, so a row of up
// to 128·K4 columns is read from memory once, in 16-byte loads. The per-lane sums run over each
// float4's 4 columns, then the float4s in order, then the warp's butterfly: deterministic, in a
// different order than the scalar kernels (agreement within f32 rounding).
__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

template <int K4, bool kCentered, bool kAdd, typename OutT>
__global__ void __launch_bounds__(kRowThreads)
    norm_forward_vec_kernel(OutT* out, float* mean_out, float* rstd_out, float* inp, AddInputs add,
                            const float* weight, const float* bias, int64_t N, int C, float eps) {
  const int lane = threadIdx.x & 31, C4 = C / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowWarps;
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  const float4* b4 = reinterpret_cast<const float4*>(bias);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5); row < N; row += stride) {
    float4* x = reinterpret_cast<float4*>(inp + row * C);
    float4 v[K4];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < K4; ++j) {
      const int c = lane + 32 * j;
      if constexpr (kAdd) {
        v[j] = c < C4 ? add4(reinterpret_cast<const float4*>(add.a + row * C)[c],
                             reinterpret_cast<const float4*>(add.b + row * C)[c])
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (c < C4) x[c] = v[j];
      } else {
        v[j] = c < C4 ? x[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      sum += sum4(v[j]);
    }
    const float mean = kCentered ? cm::norm_mean(warp_sum(sum), C) : 0.0f;
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < K4; ++j) {
      if (lane + 32 * j < C4) {
        const float4 d = make_float4(v[j].x - mean, v[j].y - mean, v[j].z - mean, v[j].w - mean);
        sq += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
      }
    }
    const float rstd = cm::norm_rstd(warp_sum(sq), C, eps);
    OutT* y = out + row * C;
#pragma unroll
    for (int j = 0; j < K4; ++j) {
      const int c = lane + 32 * j;
      if (c < C4) {
        const float4 w = w4[c], b = bias != nullptr ? b4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        store4(y, c,
               make_float4(cm::norm_forward(v[j].x, mean, rstd, w.x, b.x), cm::norm_forward(v[j].y, mean, rstd, w.y, b.y),
                           cm::norm_forward(v[j].z, mean, rstd, w.z, b.z), cm::norm_forward(v[j].w, mean, rstd, w.w, b.w)));
      }
    }
    if (lane == 0) {
      if (mean_out != nullptr) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

template <int K4, bool kCentered>
__global__ void __launch_bounds__(kRowThreads)
    norm_backward_rows_vec_kernel(float* dinp, float* mean_save, const float* dout, const float* inp,
                                  const float* weight, const float* rstd_in, int64_t N, int C, bool accumulate) {
  const int lane = threadIdx.x & 31, C4 = C / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowWarps;
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5); row < N; row += stride) {
    const float4* x = reinterpret_cast<const float4*>(inp + row * C);
    const float4* dy = reinterpret_cast<const float4*>(dout + row * C);
    float4 vx[K4], vg[K4];  // inputs, then dxhat = dy·w
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < K4; ++j) {
      const int c = lane + 32 * j;
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      vx[j] = c < C4 ? x[c] : zero;
      if (c < C4) {
        const float4 d = dy[c], w = w4[c];
        vg[j] = make_float4(cm::norm_dxhat(d.x, w.x), cm::norm_dxhat(d.y, w.y), cm::norm_dxhat(d.z, w.z),
                            cm::norm_dxhat(d.w, w.w));
      } else {
        vg[j] = zero;
      }
      sum += sum4(vx[j]);
    }
    const float mean = kCentered ? cm::norm_mean(warp_sum(sum), C) : 0.0f;
    const float r = rstd_in[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int j = 0; j < K4; ++j) {
      if (lane + 32 * j < C4) {
        sum_g += sum4(vg[j]);
        sum_gx += (vg[j].x * cm::norm_xhat(vx[j].x, mean, r) + vg[j].y * cm::norm_xhat(vx[j].y, mean, r)) +
                  (vg[j].z * cm::norm_xhat(vx[j].z, mean, r) + vg[j].w * cm::norm_xhat(vx[j].w, mean, r));
      }
    }
    const float mean_g = kCentered ? cm::norm_mean(warp_sum(sum_g), C) : 0.0f;
    const float mean_gx = cm::norm_mean(warp_sum(sum_gx), C);
    float4* dx = reinterpret_cast<float4*>(dinp + row * C);
#pragma unroll
    for (int j = 0; j < K4; ++j) {
      const int c = lane + 32 * j;
      if (c < C4) {
        float4 g = make_float4(cm::norm_dinp(cm::norm_xhat(vx[j].x, mean, r), vg[j].x, r, mean_g, mean_gx),
                               cm::norm_dinp(cm::norm_xhat(vx[j].y, mean, r), vg[j].y, r, mean_g, mean_gx),
                               cm::norm_dinp(cm::norm_xhat(vx[j].z, mean, r), vg[j].z, r, mean_g, mean_gx),
                               cm::norm_dinp(cm::norm_xhat(vx[j].w, mean, r), vg[j].w, r, mean_g, mean_gx));
        if (accumulate) {
          const float4 o = dx[c];
          g = make_float4(o.x + g.x, o.y + g.y, o.z + g.z, o.w + g.w);
        }
        dx[c] = g;
      }
    }
    if (kCentered && lane == 0) mean_save[row] = mean;
  }
}

// The float4 kernels' width K4 for C columns (C % 4 == 0): 0 where C is wider than max_k4 float4s a lane.
int vec_width(int64_t C, int max_k4) {
  const int64_t need = (C / 4 + 31) / 32;
  for (int k4 = 1; k4 <= max_k4; k4 *= 2)
    if (need <= k4) return k4;
  return 0;
}

// Calls f(std::integral_constant<int, K4>) for K4 = k4 (a power of two up to 32).
template <typename F>
void with_vec_width(int k4, F&& f) {
  switch (k4) {
    case 1: f(std::integral_constant<int, 1>{}); return;
    case 2: f(std::integral_constant<int, 2>{}); return;
    case 4: f(std::integral_constant<int, 4>{}); return;
    case 8: f(std::integral_constant<int, 8>{}); return;
    case 16: f(std::integral_constant<int, 16>{}); return;
    default: f(std::integral_constant<int, 32>{}); return;
  }
}

// dinp of one row per warp; saves the recomputed mean (layernorm) for the column kernel.
template <int K, bool kCentered>
__global__ void __launch_bounds__(kRowThreads)
    norm_backward_rows_kernel(float* dinp, float* mean_save, const float* dout, const float* inp, const float* weight,
                              const float* rstd_in, int64_t N, int C, bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowWarps + (threadIdx.x >> 5); row < N; row += stride) {
    const float* x = inp + row * C;
    const float* dy = dout + row * C;
    float vx[K], vdxhat[K];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + 32 * j;
      vx[j] = c < C ? x[c] : 0.0f;
      vdxhat[j] = c < C ? cm::norm_dxhat(dy[c], weight[c]) : 0.0f;
      if (c < C) sum += vx[j];
    }
    float mean = 0.0f;
    if constexpr (kCentered) {
      for (int c = lane + 32 * K; c < C; c += 32) sum += x[c];
      mean = cm::norm_mean(warp_sum(sum), C);
    }
    const float r = rstd_in[row];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + 32 * j;
      if (c < C) {
        sum_dxhat += vdxhat[j];
        sum_dxhat_xhat += vdxhat[j] * cm::norm_xhat(vx[j], mean, r);
      }
    }
    for (int c = lane + 32 * K; c < C; c += 32) {
      const float dxhat = cm::norm_dxhat(dy[c], weight[c]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * cm::norm_xhat(x[c], mean, r);
    }
    const float mean_dxhat = kCentered ? cm::norm_mean(warp_sum(sum_dxhat), C) : 0.0f;
    const float mean_dxhat_xhat = cm::norm_mean(warp_sum(sum_dxhat_xhat), C);
    float* dx = dinp + row * C;
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + 32 * j;
      if (c < C) {
        const float g = cm::norm_dinp(cm::norm_xhat(vx[j], mean, r), vdxhat[j], r, mean_dxhat, mean_dxhat_xhat);
        dx[c] = accumulate ? dx[c] + g : g;
      }
    }
    for (int c = lane + 32 * K; c < C; c += 32) {
      const float g =
          cm::norm_dinp(cm::norm_xhat(x[c], mean, r), cm::norm_dxhat(dy[c], weight[c]), r, mean_dxhat, mean_dxhat_xhat);
      dx[c] = accumulate ? dx[c] + g : g;
    }
    if (kCentered && lane == 0) mean_save[row] = mean;
  }
}

// partial_w[split, c] = Σ_{rows of split} dy·xhat, partial_b[split, c] = Σ dy (partial_b optional).
// Block (32, kNormColRows): x = column in the tile, y = row phase; grid (tiles, splits).
template <bool kCentered>
__global__ void __launch_bounds__(cm::kNormColTile* cm::kNormColRows)
    norm_column_partials_kernel(float* partial_w, float* partial_b, const float* dout, const float* inp,
                                const float* mean, const float* rstd, int64_t N, int C, int64_t rows_per_split) {
  __shared__ float sw[cm::kNormColRows][cm::kNormColTile];
  __shared__ float sb[cm::kNormColRows][cm::kNormColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * cm::kNormColTile + tx;
  const int64_t split = blockIdx.y;
  const int64_t r0 = split * rows_per_split;
  const int64_t r1 = r0 + rows_per_split < N ? r0 + rows_per_split : N;
  float aw = 0.0f, ab = 0.0f;
  if (c < C) {
    for (int64_t r = r0 + ty; r < r1; r += cm::kNormColRows) {
      const float dy = dout[r * C + c];
      aw += dy * cm::norm_xhat(inp[r * C + c], kCentered ? mean[r] : 0.0f, rstd[r]);
      ab += dy;
    }
  }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && c < C) {
    float w = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < cm::kNormColRows; ++k) {
      w += sw[k][tx];
      b += sb[k][tx];
    }
    partial_w[split * C + c] = w;
    if (partial_b != nullptr) partial_b[split * C + c] = b;
  }
}

// dweight[c] += Σ_s partial_w[s, c] in split order (likewise dbias; both optional).
__global__ void column_finalize_kernel(float* dweight, float* dbias, const float* partial_w, const float* partial_b,
                                       int64_t splits, int64_t C) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (dweight != nullptr) {
      float w = 0.0f;
      for (int64_t s = 0; s < splits; ++s) w += partial_w[s * C + c];
      dweight[c] += w;
    }
    if (dbias != nullptr) {
      float b = 0.0f;
      for (int64_t s = 0; s < splits; ++s) b += partial_b[s * C + c];
      dbias[c] += b;
    }
  }
}

void check_width(const char* op, int64_t C) {
  LMT_CHECK(C <= std::numeric_limits<int>::max()) << "cuda " << op << ": C = " << C << " columns is too wide";
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// x is the norm's input, or with `add` the sum it writes first (AddInputs). The float4 kernels need
// every row 16-byte aligned (out 8-byte for bf16). A fused add whose a or b is not aligned where the
// rest is runs as add() then the norm, so that it keeps the unfused op's kernel, and so its bits.
template <bool kCentered>
void norm_forward(Context& ctx, const TensorView& out, const TensorView& mean, const TensorView& rstd,
                  const TensorView& inp, const TensorView& weight, const TensorView& bias, float eps,
                  const TensorView& add_a = TensorView(), const TensorView& add_b = TensorView()) {
  const char* op = add_a.present() ? (kCentered ? "add_layernorm_forward" : "add_rmsnorm_forward")
                                   : (kCentered ? "layernorm_forward" : "rmsnorm_forward");
  const int64_t N = inp.dim(0), C = inp.dim(1);
  check_width(op, C);
  if (N == 0 || C == 0) return;
  float* m = dptr<float>(mean);
  float* r = dptr<float>(rstd);
  float* x = dptr<float>(inp);
  const float* w = dptr<const float>(weight);
  const float* b = dptr<const float>(bias);
  const AddInputs add{dptr<const float>(add_a), dptr<const float>(add_b)};
  with_out(out, [&](auto* o) {
    using OutT = std::remove_pointer_t<decltype(o)>;
    const bool vec = C % 4 == 0 && aligned_out(o) && aligned(x, 16) && aligned(w, 16) &&
                     (b == nullptr || aligned(b, 16));
    const int k4 = vec ? vec_width(C, 32) : 0;
    const bool add_vec = add.a == nullptr || (aligned(add.a, 16) && aligned(add.b, 16));
    if (k4 > 0 && !add_vec) {
      cuda::add(ctx, inp, add_a, add_b);
      norm_forward<kCentered>(ctx, out, mean, rstd, inp, weight, bias, eps);
      return;
    }
    const auto launch = [&](auto kadd) {
      constexpr bool kAdd = decltype(kadd)::value;
      if (k4 > 0) {
        with_vec_width(k4, [&](auto k) {
          if constexpr (decltype(k)::value <= 32)
            norm_forward_vec_kernel<decltype(k)::value, kCentered, kAdd, OutT>
                <<<row_blocks(N), kRowThreads, 0, ctx.stream>>>(o, m, r, x, add, w, b, N, static_cast<int>(C), eps);
          LMT_CUDA_LAUNCHED();
        });
        return;
      }
      with_cache_width(C, [&](auto k) {
        norm_forward_kernel<decltype(k)::value, kCentered, kAdd, OutT>
            <<<row_blocks(N), kRowThreads, 0, ctx.stream>>>(o, m, r, x, add, w, b, N, static_cast<int>(C), eps);
        LMT_CUDA_LAUNCHED();
      });
    };
    if (add.a != nullptr) launch(std::true_type{});
    else launch(std::false_type{});
  });
}

template <bool kCentered>
void norm_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& rstd,
                   bool accumulate) {
  const int64_t N = inp.dim(0), C = inp.dim(1);
  check_width(kCentered ? "layernorm_backward" : "rmsnorm_backward", C);
  if (N == 0 || C == 0) return;
  float* dx = dptr<float>(dinp);
  float* dw = dptr<float>(dweight);
  float* db = dptr<float>(dbias);
  const float* dy = dptr<const float>(dout);
  const float* x = dptr<const float>(inp);
  const float* w = dptr<const float>(weight);
  const float* r = dptr<const float>(rstd);

  const cm::NormColumnSplits cs = cm::norm_column_splits(N, C);
  const size_t mean_bytes = kCentered ? align256(static_cast<size_t>(N) * sizeof(float)) : 0;
  const size_t part_bytes = align256(static_cast<size_t>(cs.splits) * static_cast<size_t>(C) * sizeof(float));
  const bool need_cols = dw != nullptr || db != nullptr;
  const size_t total = mean_bytes + (need_cols ? part_bytes * (db != nullptr ? 2 : 1) : 0);
  char* scratch = total > 0 ? static_cast<char*>(ctx.scratch(total)) : nullptr;
  float* mean_save = kCentered ? reinterpret_cast<float*>(scratch) : nullptr;
  float* part_w = need_cols ? reinterpret_cast<float*>(scratch + mean_bytes) : nullptr;
  float* part_b = db != nullptr ? reinterpret_cast<float*>(scratch + mean_bytes + part_bytes) : nullptr;

  // float4 rows up to C = 2048 (x and dy·w of a row in registers: 2·4·K4 floats a lane).
  const int k4 =
      C % 4 == 0 && aligned(dx, 16) && aligned(dy, 16) && aligned(x, 16) && aligned(w, 16) ? vec_width(C, 16) : 0;
  if (k4 > 0) {
    with_vec_width(k4, [&](auto k) {
      if constexpr (decltype(k)::value <= 16)
        norm_backward_rows_vec_kernel<decltype(k)::value, kCentered><<<row_blocks(N), kRowThreads, 0, ctx.stream>>>(
            dx, mean_save, dy, x, w, r, N, static_cast<int>(C), accumulate);
      LMT_CUDA_LAUNCHED();
    });
  } else {
    with_cache_width(C, [&](auto k) {
      norm_backward_rows_kernel<decltype(k)::value, kCentered><<<row_blocks(N), kRowThreads, 0, ctx.stream>>>(
          dx, mean_save, dy, x, w, r, N, static_cast<int>(C), accumulate);
      LMT_CUDA_LAUNCHED();
    });
  }
  if (!need_cols) return;
  // part_w is computed even if only dbias were wanted (backend.h makes dweight required anyway).
  const dim3 grid(static_cast<unsigned>((C + cm::kNormColTile - 1) / cm::kNormColTile),
                  static_cast<unsigned>(cs.splits));
  const dim3 block(cm::kNormColTile, cm::kNormColRows);
  norm_column_partials_kernel<kCentered>
      <<<grid, block, 0, ctx.stream>>>(part_w, part_b, dy, x, mean_save, r, N, static_cast<int>(C), cs.rows_per_split);
  LMT_CUDA_LAUNCHED();
  column_finalize_kernel<<<blocks_for(C, 256), 256, 0, ctx.stream>>>(dw, db, part_w, part_b, cs.splits, C);
  LMT_CUDA_LAUNCHED();
}

}  // namespace

void layernorm_forward(Context& ctx, const TensorView& out, const TensorView& mean, const TensorView& rstd,
                       const TensorView& inp, const TensorView& weight, const TensorView& bias, float eps) {
  norm_forward<true>(ctx, out, mean, rstd, inp, weight, bias, eps);
}

void layernorm_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                        const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                        const TensorView& rstd, bool accumulate) {
  // `mean` is forward's; like the ref and cpu backends we recompute it from inp (backend.h allows it).
  (void)mean;
  norm_backward<true>(ctx, dinp, dweight, dbias, dout, inp, weight, rstd, accumulate);
}

void rmsnorm_forward(Context& ctx, const TensorView& out, const TensorView& rstd, const TensorView& inp,
                     const TensorView& weight, float eps) {
  norm_forward<false>(ctx, out, TensorView(), rstd, inp, weight, TensorView(), eps);
}

void add_layernorm_forward(Context& ctx, const TensorView& sum, const TensorView& out, const TensorView& mean,
                           const TensorView& rstd, const TensorView& a, const TensorView& b, const TensorView& weight,
                           const TensorView& bias, float eps) {
  norm_forward<true>(ctx, out, mean, rstd, sum, weight, bias, eps, a, b);
}

void add_rmsnorm_forward(Context& ctx, const TensorView& sum, const TensorView& out, const TensorView& rstd,
                         const TensorView& a, const TensorView& b, const TensorView& weight, float eps) {
  norm_forward<false>(ctx, out, TensorView(), rstd, sum, weight, TensorView(), eps, a, b);
}

void rmsnorm_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                      const TensorView& inp, const TensorView& weight, const TensorView& rstd, bool accumulate) {
  norm_backward<false>(ctx, dinp, dweight, TensorView(), dout, inp, weight, rstd, accumulate);
}

}  // namespace lmt::kernels::cuda
