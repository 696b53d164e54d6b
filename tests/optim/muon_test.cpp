// Muon's Newton–Schulz orthogonalisation against a plain f64 transcription of the reference
// iteration (muon.py: transpose tall matrices, A = XXᵀ), on both backends and on wide, tall and
// square shapes; and the properties Muon relies on.
#include "lmt/optim/muon.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"

namespace lmt::optim {
namespace {

using Matrix = std::vector<double>;  // row-major

Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  Rng rng(seed);
  Matrix m(rows * cols);
  for (double& x : m) x = static_cast<float>(rng.normal());  // f32-representable
  return m;
}

Matrix transpose(const Matrix& m, int64_t rows, int64_t cols) {
  Matrix t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

// c[n,p] = a[n,k] · b[k,p]
Matrix mul(const Matrix& a, const Matrix& b, int64_t n, int64_t k, int64_t p) {
  Matrix c(n * p, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < p; ++j) c[i * p + j] += a[i * k + l] * b[l * p + j];
  return c;
}

// muon.py's zeropower_via_newtonschulz5, in f64.
Matrix reference_ns(Matrix g, int64_t rows, int64_t cols, int steps) {
  const bool tall = rows > cols;
  if (tall) {
    g = transpose(g, rows, cols);
    std::swap(rows, cols);
  }
  double norm = 0;
  for (double x : g) norm += x * x;
  norm = std::sqrt(norm);
  for (double& x : g) x /= norm + 1e-7;
  for (int s = 0; s < steps; ++s) {
    const Matrix a = mul(g, transpose(g, rows, cols), rows, cols, rows);
    const Matrix a2 = mul(a, a, rows, rows, rows);
    Matrix b(a.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = -4.7750 * a[i] + 2.0315 * a2[i];
    const Matrix bx = mul(b, g, rows, rows, cols);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 3.4445 * g[i] + bx[i];
  }
  return tall ? transpose(g, rows, cols) : g;
}

std::vector<float> lmt_ns(kernels::Backend& b, const Matrix& g, int64_t rows, int64_t cols, int steps) {
  std::vector<float> x(g.begin(), g.end());
  MuonUpdater muon(rows * cols, std::min(rows, cols));
  muon.orthogonalise(b, TensorView(x.data(), Shape{rows, cols}, DType::kF32), steps);
  return x;
}

struct Dims {
  int64_t rows, cols;
};
const Dims kShapes[] = {{8, 24}, {24, 8}, {16, 16}, {37, 5}, {5, 37}, {64, 48}};

TEST(Muon, NewtonSchulzMatchesTheReferenceIteration) {
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()}) {
    for (const Dims d : kShapes) {
      for (int steps : {1, 5}) {
        SCOPED_TRACE(std::string(b->name()) + " [" + std::to_string(d.rows) + "," + std::to_string(d.cols) +
                     "] steps " + std::to_string(steps));
        const Matrix g = random_matrix(d.rows, d.cols, 1);
        const Matrix want = reference_ns(g, d.rows, d.cols, steps);
        const std::vector<float> got = lmt_ns(*b, g, d.rows, d.cols, steps);
        double scale = 0;
        for (double w : want) scale = std::max(scale, std::fabs(w));
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 * scale) << i;
      }
    }
  }
}

// What Muon relies on: singular values pushed into roughly [0.7, 1.2] (Keller Jordan's
// coefficients do not converge to exactly 1), whatever the input's scale.
TEST(Muon, OrthogonalisesAndIgnoresScale) {
  for (const Dims d : kShapes) {
    SCOPED_TRACE(std::to_string(d.rows) + "x" + std::to_string(d.cols));
    const Matrix g = random_matrix(d.rows, d.cols, 2);
    const std::vector<float> o = lmt_ns(kernels::cpu_backend(), g, d.rows, d.cols, 5);
    const int64_t side = std::min(d.rows, d.cols);
    // Gram on the small side: its eigenvalues are the squared singular values.
    const Matrix of(o.begin(), o.end());
    const Matrix gram = d.rows <= d.cols ? mul(of, transpose(of, d.rows, d.cols), d.rows, d.cols, d.rows)
                                         : mul(transpose(of, d.rows, d.cols), of, d.cols, d.rows, d.cols);
    double trace = 0;
    for (int64_t i = 0; i < side; ++i) trace += gram[i * side + i];
    EXPECT_GT(trace / side, 0.5);
    EXPECT_LT(trace / side, 1.3);
    Matrix v(side, 1.0);  // power iteration for the largest eigenvalue
    double lambda = 0;
    for (int it = 0; it < 200; ++it) {
      const Matrix w = mul(gram, v, side, side, 1);
      lambda = 0;
      for (double x : w) lambda += x * x;
      lambda = std::sqrt(lambda);
      for (int64_t i = 0; i < side; ++i) v[i] = w[i] / lambda;
    }
    EXPECT_LT(std::sqrt(lambda), 1.3) << "largest singular value";

    Matrix scaled = g;
    for (double& x : scaled) x *= 1024.0;  // a power of two: exactly the same after normalising
    const std::vector<float> o2 = lmt_ns(kernels::cpu_backend(), scaled, d.rows, d.cols, 5);
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o2[i], 1e-6) << i;
  }
}

// Tall matrices take the XᵀX path; it must equal the transposed wide result.
TEST(Muon, TallPathIsTheTransposedWidePath) {
  const int64_t R = 40, C = 12;
  const Matrix g = random_matrix(R, C, 3);
  const std::vector<float> tall = lmt_ns(kernels::cpu_backend(), g, R, C, 5);
  const std::vector<float> wide = lmt_ns(kernels::cpu_backend(), transpose(g, R, C), C, R, 5);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) ASSERT_NEAR(tall[r * C + c], wide[c * R + r], 1e-6) << r << "," << c;
}

TEST(Muon, ShapeScale) {
  EXPECT_FLOAT_EQ(muon_shape_scale(16, 8), std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(muon_shape_scale(8, 16), 1.0f);
  EXPECT_FLOAT_EQ(muon_shape_scale(12, 12), 1.0f);
  EXPECT_FLOAT_EQ(muon_shape_scale(3072, 768), 2.0f);
}

// One update by hand: momentum, Nesterov direction, decay and step (NS checked above).
TEST(Muon, UpdateComposesMomentumDecayAndStep) {
  const int64_t R = 6, C = 4;
  const Matrix g0 = random_matrix(R, C, 4), w0 = random_matrix(R, C, 5), m0 = random_matrix(R, C, 6);
  std::vector<float> w(w0.begin(), w0.end()), g(g0.begin(), g0.end()), m(m0.begin(), m0.end());
  MuonStepParams p;
  p.lr = 0.1f;
  p.momentum = 0.9f;
  p.weight_decay = 0.5f;
  p.grad_scale = 0.5f;
  MuonUpdater muon(R * C, C);
  muon.update(kernels::ref_backend(), TensorView(w.data(), Shape{R, C}, DType::kF32),
              TensorView(g.data(), Shape{R, C}, DType::kF32), TensorView(m.data(), Shape{R, C}, DType::kF32),
              TensorView(), p);
  Matrix buf(R * C), dir(R * C);
  for (int64_t i = 0; i < R * C; ++i) {
    buf[i] = 0.9 * m0[i] + 0.5 * g0[i];
    dir[i] = 0.5 * g0[i] + 0.9 * buf[i];
  }
  const Matrix o = reference_ns(dir, R, C, 5);
  for (int64_t i = 0; i < R * C; ++i) {
    EXPECT_NEAR(m[i], buf[i], 1e-6) << i;
    EXPECT_NEAR(w[i], (1 - 0.1 * 0.5) * w0[i] - 0.1 * std::sqrt(6.0 / 4.0) * o[i], 1e-6) << i;
  }
}

}  // namespace
}  // namespace lmt::optim
