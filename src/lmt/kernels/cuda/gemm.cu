// GEMMs on cuBLASLt: matmul, batched matmul, the linear layer's forward and backward.
//
// Row-major products map onto cuBLASLt's column-major convention by computing Cᵀ = op(B)ᵀ·op(A)ᵀ: a
// row-major [R,C] matrix with leading dimension ld is the column-major [C,R] matrix with the same ld,
// so no data moves. The bias epilogue adds a vector along cuBLASLt's rows, which are our columns.
//
// f32 operands are multiplied with CUBLAS_COMPUTE_32F (full f32, never TF32: results must match the
// cpu and ref backends within f32 tolerances); bf16 operands with f32 accumulation and f32 output.
// The algorithm for a shape (dims, leading dims, transposes, dtype, epilogue, batch, pointer
// alignment) is chosen once by cuBLASLt's heuristic and cached with its descriptors. Where the
// heuristic offers none (odd leading dimensions in tests, misaligned views), a plain tiled kernel of
// this file computes the same product, so every shape works.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <tuple>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/ops.h"

#define LMT_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                             \
    cublasStatus_t lmt_st_ = (expr);                                                               \
    LMT_CHECK(lmt_st_ == CUBLAS_STATUS_SUCCESS) << #expr << ": cublasLt status " << static_cast<int>(lmt_st_); \
  } while (0)

namespace lmt::kernels::cuda {
namespace {

// Largest power of two (<= 256) dividing the address: what the algorithm may assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

struct PlanKey {
  int64_t M, N, K, lda, ldb, ldc, batch, sa, sb, sc;
  bool ta, tb, bf16, bias, beta_zero;
  uint32_t al_a, al_b, al_c, al_bias;
  auto tie() const {
    return std::tie(M, N, K, lda, ldb, ldc, batch, sa, sb, sc, ta, tb, bf16, bias, beta_zero, al_a, al_b, al_c, al_bias);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  bool usable = false;  // false: cuBLASLt offered no algorithm; use the fallback kernel
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

std::map<PlanKey, Plan>& plans() {
  static auto* m = new std::map<PlanKey, Plan>();  // lives until exit: descriptors are never freed mid-run
  return *m;
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l;
  LMT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    LMT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    LMT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

Plan make_plan(Context& ctx, const GemmArgs& g, const PlanKey& key) {
  Plan p;
  const cudaDataType_t in = g.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  LMT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: D[N,M] = op'(B)·op'(A) with B first.
  const cublasOperation_t opb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof(opb)));
  LMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof(opa)));
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const cudaDataType_t bt = CUDA_R_32F;
    LMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  p.a = layout(in, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, g.batch, g.sb);
  p.b = layout(in, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, g.batch, g.sa);
  p.c = layout(CUDA_R_32F, g.N, g.M, g.ldc, g.batch, g.sc);

  cublasLtMatmulPreference_t pref;
  LMT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = Context::kLtWorkspaceBytes;
  LMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // Operand A of cuBLASLt is our B, and vice versa.
  LMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.al_b, sizeof(uint32_t)));
  LMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.al_a, sizeof(uint32_t)));
  LMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.al_c, sizeof(uint32_t)));
  LMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.al_c, sizeof(uint32_t)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.usable = true;
  }
  return p;
}

// ---- the fallback: a plain shared-memory tiled GEMM (any shape, stride, alignment) -------------------
constexpr int kTile = 16;

template <typename T>
__global__ void fallback_gemm_kernel(GemmArgs g) {
  __shared__ float as[kTile][kTile + 1];
  __shared__ float bs[kTile][kTile + 1];
  const int64_t z = blockIdx.z;
  const T* A = static_cast<const T*>(g.A) + z * g.sa;
  const T* B = static_cast<const T*>(g.B) + z * g.sb;
  float* C = g.C + z * g.sc;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < g.K; k0 += kTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    as[threadIdx.y][threadIdx.x] =
        (row < g.M && ka < g.K) ? load_f(A, g.trans_a ? ka * g.lda + row : row * g.lda + ka) : 0.0f;
    bs[threadIdx.y][threadIdx.x] =
        (col < g.N && kb < g.K) ? load_f(B, g.trans_b ? col * g.ldb + kb : kb * g.ldb + col) : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) acc = fmaf(as[threadIdx.y][kk], bs[kk][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < g.M && col < g.N) {
    float r = g.alpha * acc;
    if (g.beta != 0.0f) r += g.beta * C[row * g.ldc + col];
    if (g.bias != nullptr) r += g.bias[col];
    C[row * g.ldc + col] = r;
  }
}

void fallback_gemm(Context& ctx, const GemmArgs& g) {
  LMT_CHECK(g.batch <= 65535) << "gemm: batch " << g.batch << " too large for the fallback kernel";
  const dim3 threads(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((g.N + kTile - 1) / kTile), static_cast<unsigned>((g.M + kTile - 1) / kTile),
                  static_cast<unsigned>(g.batch));
  LMT_CHECK(grid.y <= 65535) << "gemm: M=" << g.M << " too large for the fallback kernel";
  if (g.bf16) {
    fallback_gemm_kernel<uint16_t><<<grid, threads, 0, ctx.stream>>>(g);
  } else {
    fallback_gemm_kernel<float><<<grid, threads, 0, ctx.stream>>>(g);
  }
  LMT_CUDA_LAUNCHED();
}

__global__ void column_sum_kernel_f32(float* dbias, const float* dout, int64_t N, int64_t OC) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;  // rows in order: deterministic
  for (int64_t n = 0; n < N; ++n) s += dout[n * OC + c];
  dbias[c] += s;
}

// Column sums of a tall matrix: blocks of rows write partial sums, a second pass adds them in order.
__global__ void column_partial_kernel(float* partial, const void* dout, bool bf16, int64_t N, int64_t OC,
                                      int64_t rows_per_part) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t part = blockIdx.y;
  if (c >= OC) return;
  const int64_t begin = part * rows_per_part;
  const int64_t end = begin + rows_per_part < N ? begin + rows_per_part : N;
  float s = 0.0f;
  if (bf16) {
    const uint16_t* d = static_cast<const uint16_t*>(dout);
    for (int64_t n = begin; n < end; ++n) s += load_f(d, n * OC + c);
  } else {
    const float* d = static_cast<const float*>(dout);
    for (int64_t n = begin; n < end; ++n) s += d[n * OC + c];
  }
  partial[part * OC + c] = s;
}

}  // namespace

void gemm(Context& ctx, const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {  // an empty product: C = beta·C (+ bias); rare, so the fallback handles it
    fallback_gemm(ctx, g);
    return;
  }
  PlanKey key{g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.batch, g.sa, g.sb, g.sc, g.trans_a, g.trans_b, g.bf16,
              g.bias != nullptr, g.beta == 0.0f, alignment_of(g.A), alignment_of(g.B), alignment_of(g.C),
              g.bias ? alignment_of(g.bias) : 256u};
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(ctx, g, key)).first;
  Plan& p = it->second;
  if (!p.usable) {
    fallback_gemm(ctx, g);
    return;
  }
  if (g.bias != nullptr)
    LMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  LMT_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, p.op, &g.alpha, g.B, p.a, g.A, p.b, &g.beta, g.C, p.c, g.C, p.c, &p.algo,
                                  ctx.lt_workspace, Context::kLtWorkspaceBytes, ctx.stream));
}

namespace {
// The GEMM of matmul (rank-2 views) or matmul_batched (rank-3: a stack of independent products).
GemmArgs matmul_args(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a, bool trans_b,
                     bool accumulate) {
  const int r = a.rank() - 2;  // 0, or 1 for the batch dimension
  GemmArgs g;
  g.bf16 = is_bf16(a);
  g.M = trans_a ? a.dim(r + 1) : a.dim(r);
  g.K = trans_a ? a.dim(r) : a.dim(r + 1);
  g.N = trans_b ? b.dim(r) : b.dim(r + 1);
  g.A = a.data(), g.lda = a.dim(r + 1), g.trans_a = trans_a;
  g.B = b.data(), g.ldb = b.dim(r + 1), g.trans_b = trans_b;
  g.C = dptr<float>(c), g.ldc = g.N;
  g.beta = accumulate ? 1.0f : 0.0f;
  // A batch of one is one plain product (bit-identical to matmul of the same matrices).
  if (r == 1 && a.dim(0) > 1) {
    g.batch = a.dim(0);
    g.sa = a.dim(1) * a.dim(2), g.sb = b.dim(1) * b.dim(2), g.sc = g.M * g.N;
  }
  return g;
}
}  // namespace

void matmul(Context& ctx, const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
            bool trans_b, bool accumulate) {
  gemm(ctx, matmul_args(c, a, b, trans_a, trans_b, accumulate));
}

void linear_forward(Context& ctx, const TensorView& out, const TensorView& inp, const TensorView& weight,
                    const TensorView& bias) {
  GemmArgs g;
  g.bf16 = is_bf16(inp);
  g.M = inp.dim(0);
  g.K = inp.dim(1);
  g.N = weight.dim(0);
  g.A = inp.data();
  g.lda = g.K;
  g.B = weight.data();
  g.ldb = g.K;
  g.trans_b = true;
  g.C = dptr<float>(out);
  g.ldc = g.N;
  g.bias = dptr<const float>(bias);
  gemm(ctx, g);
}

void column_sum_accumulate(Context& ctx, const TensorView& dbias, const TensorView& dout) {
  const int64_t N = dout.dim(0), OC = dout.dim(1);
  float* db = dptr<float>(dbias);
  const int threads = 256;
  // Enough parts that the row loops are short, few enough that the second pass is cheap.
  const int64_t rows_per_part = 256;
  const int64_t parts = (N + rows_per_part - 1) / rows_per_part;
  if (parts <= 1 && !is_bf16(dout)) {
    column_sum_kernel_f32<<<blocks_for(OC, threads), threads, 0, ctx.stream>>>(db, static_cast<const float*>(dout.data()), N, OC);
    LMT_CUDA_LAUNCHED();
    return;
  }
  LMT_CHECK(parts <= 65535) << "column sum over " << N << " rows";
  float* partial = static_cast<float*>(ctx.scratch(static_cast<size_t>(parts * OC) * sizeof(float)));
  const dim3 grid(blocks_for(OC, threads), static_cast<unsigned>(parts));
  column_partial_kernel<<<grid, threads, 0, ctx.stream>>>(partial, dout.data(), is_bf16(dout), N, OC, rows_per_part);
  LMT_CUDA_LAUNCHED();
  column_sum_kernel_f32<<<blocks_for(OC, threads), threads, 0, ctx.stream>>>(db, partial, parts, OC);
  LMT_CUDA_LAUNCHED();
}

void linear_backward(Context& ctx, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                     const TensorView& dout, const TensorView& inp, const TensorView& weight) {
  const bool bf = is_bf16(dout);
  const int64_t N = dout.dim(0), OC = dout.dim(1), C = weight.dim(1);
  if (dinp.present()) {  // dinp[N,C] = dout[N,OC] · weight[OC,C]
    GemmArgs g;
    g.bf16 = bf;
    g.M = N, g.N = C, g.K = OC;
    g.A = dout.data(), g.lda = OC;
    g.B = weight.data(), g.ldb = C;
    g.C = dptr<float>(dinp), g.ldc = C;
    gemm(ctx, g);
  }
  if (dweight.present()) linear_weight_grad(ctx, dweight, dout, inp, /*accumulate=*/true);
  if (dbias.present()) column_sum_accumulate(ctx, dbias, dout);
}

void linear_weight_grad(Context& ctx, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                        bool accumulate) {
  const int64_t N = dout.dim(0), OC = dout.dim(1), C = inp.dim(1);
  GemmArgs g;
  g.bf16 = is_bf16(dout);
  g.M = OC, g.N = C, g.K = N;
  g.A = dout.data(), g.lda = OC, g.trans_a = true;
  g.B = inp.data(), g.ldb = C;
  g.C = dptr<float>(dweight), g.ldc = C;
  g.beta = accumulate ? 1.0f : 0.0f;
  gemm(ctx, g);
}

}  // namespace lmt::kernels::cuda
