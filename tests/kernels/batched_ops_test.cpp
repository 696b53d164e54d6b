// matmul_batched, matmul_batched_symmetric and axpby (the ops Muon's batched Newton–Schulz runs
// on), on every backend: matmul_batched equals matmul per matrix bit for bit (its contract), the
// symmetric product is the product made exactly symmetric, and axpby equals the
// formula computed in f64 to f32 rounding, with its bf16 copy exactly lmt::bf16's rounding and
// each element's result independent of where the span starts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lmt/base/bf16.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::kernels {
namespace {

std::vector<float> randn(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

TEST(BatchedOps, MatmulBatchedEqualsMatmulPerMatrix) {
  struct Case {
    int64_t nb, M, K, N;
  };
  for (Backend* b : {&cpu_backend(), &ref_backend()}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (const Case c : {Case{3, 5, 7, 9}, Case{4, 10, 30, 10}, Case{2, 64, 48, 64}, Case{3, 37, 5, 37}, Case{1, 16, 16, 16}}) {
        for (int t = 0; t < 8; ++t) {
          const bool ta = t & 1, tb = t & 2, acc = t & 4;
          SCOPED_TRACE(std::string(b->name()) + " " + std::string(dtype_name(dt)) + " nb " + std::to_string(c.nb) + " M " +
                       std::to_string(c.M) + " K " + std::to_string(c.K) + " N " + std::to_string(c.N) +
                       (ta ? " ta" : "") + (tb ? " tb" : "") + (acc ? " acc" : ""));
          const int64_t na = c.M * c.K, nbm = c.K * c.N, nc = c.M * c.N;
          const std::vector<float> a32 = randn(c.nb * na, 1), b32 = randn(c.nb * nbm, 2), c0 = randn(c.nb * nc, 3);
          Tensor A(Shape{c.nb, ta ? c.K : c.M, ta ? c.M : c.K}, dt), B(Shape{c.nb, tb ? c.N : c.K, tb ? c.K : c.N}, dt);
          b->convert(A, TensorView(const_cast<float*>(a32.data()), Shape{c.nb * na}, DType::kF32));
          b->convert(B, TensorView(const_cast<float*>(b32.data()), Shape{c.nb * nbm}, DType::kF32));
          std::vector<float> batched = c0, single = c0;
          b->matmul_batched(TensorView(batched.data(), Shape{c.nb, c.M, c.N}, DType::kF32), A, B, ta, tb, acc);
          const size_t es = dtype_size(dt);
          for (int64_t i = 0; i < c.nb; ++i) {
            const TensorView ai(static_cast<char*>(A.view().data()) + i * na * es, Shape{A.shape()[1], A.shape()[2]}, dt);
            const TensorView bi(static_cast<char*>(B.view().data()) + i * nbm * es, Shape{B.shape()[1], B.shape()[2]}, dt);
            b->matmul(TensorView(single.data() + i * nc, Shape{c.M, c.N}, DType::kF32), ai, bi, ta, tb, acc);
          }
          ASSERT_EQ(std::memcmp(batched.data(), single.data(), batched.size() * sizeof(float)), 0);
          // And the product itself, against f64 on the (bf16-rounded) operands.
          std::vector<float> ar(c.nb * na), br(c.nb * nbm);
          b->convert(TensorView(ar.data(), Shape{c.nb * na}, DType::kF32), A);
          b->convert(TensorView(br.data(), Shape{c.nb * nbm}, DType::kF32), B);
          for (int64_t i = 0; i < c.nb; ++i)
            for (int64_t m = 0; m < c.M; ++m)
              for (int64_t n = 0; n < c.N; ++n) {
                double want = acc ? c0[i * nc + m * c.N + n] : 0.0;
                for (int64_t k = 0; k < c.K; ++k)
                  want += static_cast<double>(ar[i * na + (ta ? k * c.M + m : m * c.K + k)]) *
                          br[i * nbm + (tb ? n * c.K + k : k * c.N + n)];
                ASSERT_NEAR(batched[i * nc + m * c.N + n], want, 1e-4 * (1 + std::fabs(want)));
              }
        }
      }
    }
  }
}

// The cpu backend runs one oneDNN primitive with a batch dimension; at Muon's real sizes (GPT-2
// small's 768 x 768 and 768 x 3072 Gram and update products) it must still pick kernels that give
// each matrix the 2-D primitive's bits.
TEST(BatchedOps, CpuBatchedGemmKeepsTheBitsAtModelSizes) {
  Backend& b = cpu_backend();
  struct Case {
    int64_t M, K, N;
    bool ta, tb;
  };
  for (DType dt : {DType::kBF16}) {  // the default optim.muon_ns_dtype (f32 is covered above)
    for (const Case c : {Case{768, 3072, 768, false, true}, Case{768, 768, 768, false, false},
                         Case{768, 768, 3072, false, false}, Case{3072, 768, 768, false, false},
                         Case{768, 2304, 768, true, false}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " M " + std::to_string(c.M) + " K " + std::to_string(c.K) + " N " +
                   std::to_string(c.N));
      const int64_t nb = 2, na = c.M * c.K, nbm = c.K * c.N, nc = c.M * c.N;
      const std::vector<float> a32 = randn(nb * na, 6), b32 = randn(nb * nbm, 7);
      Tensor A(Shape{nb, c.ta ? c.K : c.M, c.ta ? c.M : c.K}, dt), B(Shape{nb, c.tb ? c.N : c.K, c.tb ? c.K : c.N}, dt);
      b.convert(A, TensorView(const_cast<float*>(a32.data()), Shape{nb * na}, DType::kF32));
      b.convert(B, TensorView(const_cast<float*>(b32.data()), Shape{nb * nbm}, DType::kF32));
      std::vector<float> batched(nb * nc), single(nb * nc);
      b.matmul_batched(TensorView(batched.data(), Shape{nb, c.M, c.N}, DType::kF32), A, B, c.ta, c.tb, false);
      const size_t es = dtype_size(dt);
      for (int64_t i = 0; i < nb; ++i) {
        const TensorView ai(static_cast<char*>(A.view().data()) + i * na * es, Shape{A.shape()[1], A.shape()[2]}, dt);
        const TensorView bi(static_cast<char*>(B.view().data()) + i * nbm * es, Shape{B.shape()[1], B.shape()[2]}, dt);
        b.matmul(TensorView(single.data() + i * nc, Shape{c.M, c.N}, DType::kF32), ai, bi, c.ta, c.tb, false);
      }
      ASSERT_EQ(std::memcmp(batched.data(), single.data(), batched.size() * sizeof(float)), 0);
    }
  }
  // And the symmetric product's row blocks: XXᵀ (qkv, fc), XᵀX (a tall proj) and A·A.
  for (const Case c : {Case{768, 2304, 768, false, true}, Case{768, 3072, 768, true, false},
                       Case{768, 768, 768, false, false}}) {
    SCOPED_TRACE("symmetric M " + std::to_string(c.M) + " K " + std::to_string(c.K));
    const int64_t nb = 2, na = c.M * c.K, nc = c.M * c.M;
    const std::vector<float> a32 = randn(nb * na, 8);
    Tensor A(Shape{nb, c.ta ? c.K : c.M, c.ta ? c.M : c.K}, DType::kBF16);
    b.convert(A, TensorView(const_cast<float*>(a32.data()), Shape{nb * na}, DType::kF32));
    std::vector<float> batched(nb * nc), single(nb * nc);
    b.matmul_batched_symmetric(TensorView(batched.data(), Shape{nb, c.M, c.M}, DType::kF32), A, A, c.ta, c.tb);
    for (int64_t i = 0; i < nb; ++i) {
      const Shape one{1, A.shape()[1], A.shape()[2]};
      const TensorView ai(static_cast<char*>(A.view().data()) + i * na * 2, one, DType::kBF16);
      b.matmul_batched_symmetric(TensorView(single.data() + i * nc, Shape{1, c.M, c.M}, DType::kF32), ai, ai, c.ta,
                                 c.tb);
    }
    ASSERT_EQ(std::memcmp(batched.data(), single.data(), batched.size() * sizeof(float)), 0);
  }
}

// matmul_batched_symmetric on the products Muon takes it for: XXᵀ, XᵀX and A·A with A symmetric.
// Every element within f32 rounding of f64 on the (bf16-rounded) operands; each matrix's result
// independent of its batch (bit for bit); and on the cpu backend, which computes the lower triangle
// in row blocks from M = 128 on, exactly symmetric (sizes with a partial last block included). M = 300
// in f32 on AVX2 with up to two threads takes the blocks spread over the threads (three blocks of 64
// rows and one of 108; symmetric_by_thread() in kernels/cpu/matmul.cpp).
TEST(BatchedOps, MatmulBatchedSymmetricIsTheProductMadeSymmetric) {
  enum Kind { kXXt, kXtX, kAA };
  for (Backend* b : {&cpu_backend(), &ref_backend()}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (const int64_t M : {5, 130, 200, 300}) {
        for (const Kind kind : {kXXt, kXtX, kAA}) {
          const int64_t K = kind == kAA ? M : 300, nb = 3, na = M * K, nc = M * M;
          SCOPED_TRACE(std::string(b->name()) + " " + std::string(dtype_name(dt)) + " M " + std::to_string(M) +
                       " kind " + std::to_string(kind));
          std::vector<float> a32 = randn(nb * na, 11);
          if (kind == kAA)  // symmetric A
            for (int64_t i = 0; i < nb; ++i)
              for (int64_t r = 0; r < M; ++r)
                for (int64_t c = 0; c < r; ++c) a32[i * na + c * M + r] = a32[i * na + r * M + c];
          Tensor A(kind == kXtX ? Shape{nb, K, M} : Shape{nb, M, K}, dt);
          b->convert(A, TensorView(a32.data(), Shape{nb * na}, DType::kF32));
          const bool ta = kind == kXtX, tb = kind == kXXt;
          std::vector<float> got(nb * nc, -1.0f), alone(nb * nc, -2.0f);
          b->matmul_batched_symmetric(TensorView(got.data(), Shape{nb, M, M}, DType::kF32), A, A, ta, tb);
          const size_t es = dtype_size(dt);
          for (int64_t i = 0; i < nb; ++i) {
            const TensorView ai(static_cast<char*>(A.view().data()) + i * na * es, Shape{A.shape()[1], A.shape()[2]}, dt);
            b->matmul_batched_symmetric(TensorView(alone.data() + i * nc, Shape{1, M, M}, DType::kF32),
                                        ai.reshape(Shape{1, A.shape()[1], A.shape()[2]}),
                                        ai.reshape(Shape{1, A.shape()[1], A.shape()[2]}), ta, tb);
          }
          ASSERT_EQ(std::memcmp(got.data(), alone.data(), got.size() * sizeof(float)), 0) << "batch-dependent";
          std::vector<float> ar(nb * na);
          b->convert(TensorView(ar.data(), Shape{nb * na}, DType::kF32), A);
          for (int64_t i = 0; i < nb; ++i)
            for (int64_t r = 0; r < M; ++r)
              for (int64_t c = 0; c < M; ++c) {
                const float* x = ar.data() + i * na;
                double want = 0;
                for (int64_t k = 0; k < K; ++k) {
                  const double left = kind == kXtX ? x[k * M + r] : x[r * K + k];
                  const double right = kind == kXXt ? x[c * K + k] : x[k * M + c];
                  want += left * right;
                }
                const float v = got[i * nc + r * M + c];
                ASSERT_NEAR(v, want, 1e-4 * (1 + std::fabs(want))) << i << ": " << r << "," << c;
                if (b == &cpu_backend() && M >= 2 * Backend::kSymmetricBlockMin) {
                  ASSERT_EQ(v, got[i * nc + c * M + r]) << "not symmetric at " << r << "," << c;
                }
              }
        }
      }
    }
  }
}

TEST(BatchedOps, AxpbyIsTheFormulaWithItsBf16Copy) {
  for (Backend* b : {&cpu_backend(), &ref_backend()}) {
    SCOPED_TRACE(std::string(b->name()));
    for (int64_t n : {1, 15, 16, 17, 100, 40000}) {  // tails and a span long enough to run in parallel
      const std::vector<float> x = randn(n, 4), y = randn(n, 5);
      std::vector<float> out(n);
      std::vector<bf16> out16(n);
      const float alpha = 3.4445f, beta = -0.75f;
      b->axpby(TensorView(out.data(), Shape{n}, DType::kF32), alpha, TensorView(const_cast<float*>(x.data()), Shape{n}, DType::kF32),
               beta, TensorView(const_cast<float*>(y.data()), Shape{n}, DType::kF32),
               TensorView(out16.data(), Shape{n}, DType::kBF16));
      for (int64_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(alpha) * x[i] + static_cast<double>(beta) * y[i];
        ASSERT_NEAR(out[i], want, 4e-7 * (std::fabs(alpha * x[i]) + std::fabs(beta * y[i]))) << i;
        ASSERT_EQ(out16[i].bits, bf16::round_from_float(out[i])) << i;
      }
      // In place (out = x), without the bf16 copy, and from an offset: the same bits per element.
      if (n > 5) {
        std::vector<float> inplace = x;
        b->axpby(TensorView(inplace.data() + 5, Shape{n - 5}, DType::kF32), alpha,
                 TensorView(inplace.data() + 5, Shape{n - 5}, DType::kF32), beta,
                 TensorView(const_cast<float*>(y.data()) + 5, Shape{n - 5}, DType::kF32), TensorView());
        EXPECT_EQ(std::memcmp(inplace.data() + 5, out.data() + 5, (n - 5) * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(inplace.data(), x.data(), 5 * sizeof(float)), 0) << "elements before the span";
      }
    }
  }
}

}  // namespace
}  // namespace lmt::kernels
