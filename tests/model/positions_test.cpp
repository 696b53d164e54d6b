// Positions given to the model (data.reset_positions): with document masking, a document packed
// after another one sees exactly what it would see at the start of a row, with RoPE and with a
// learned position table; without given positions, the model keeps n % T. (With RoPE the two agree
// up to rounding anyway, since RoPE is relative; with learned positions they differ.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"
#include "model_test_util.h"

namespace lmt::model {
namespace {

constexpr int64_t kT = 12, kFirst = 5, kSecond = kT - kFirst;

struct Row {
  std::vector<int32_t> tokens, targets, doc_ids, positions;
};

// A row of two documents: `a` (kFirst tokens) then `b` (kSecond tokens); only b's targets count.
Row packed(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  Row r;
  for (int64_t t = 0; t < kT; ++t) {
    const bool in_b = t >= kFirst;
    r.tokens.push_back(in_b ? b[t - kFirst] : a[t]);
    r.targets.push_back(in_b ? (b[t - kFirst] * 7 + 3) % 37 : -100);
    r.doc_ids.push_back(in_b ? 2 : 1);
    r.positions.push_back(static_cast<int32_t>(in_b ? t - kFirst : t));
  }
  return r;
}

// The same document b at the start of a row, followed by filler (another document, no targets).
Row alone(const std::vector<int32_t>& b, const std::vector<int32_t>& filler) {
  Row r;
  for (int64_t t = 0; t < kT; ++t) {
    const bool in_b = t < kSecond;
    r.tokens.push_back(in_b ? b[t] : filler[t - kSecond]);
    r.targets.push_back(in_b ? (b[t] * 7 + 3) % 37 : -100);
    r.doc_ids.push_back(in_b ? 1 : 2);
    r.positions.push_back(static_cast<int32_t>(in_b ? t : t - kSecond));
  }
  return r;
}

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng.below(37));
  return v;
}

double at(const TensorView& t, int64_t i) { return t.dtype() == DType::kF64 ? t.as<double>()[i] : t.as<float>()[i]; }

struct Case {
  const char* variant;
  DType master;
  const char* backend;  // "ref" or "cpu"
  double tol;
};

kernels::Backend& backend_of(const Case& k) {
  return std::string(k.backend) == "ref" ? kernels::ref_backend() : kernels::cpu_backend();
}

class TransformerPositions : public ::testing::TestWithParam<Case> {};

TEST_P(TransformerPositions, SecondPackedDocumentMatchesItselfAtTheStartOfARow) {
  const Case& k = GetParam();
  testing::Variant v;
  for (const auto& x : testing::tiny_variants())
    if (x.name == k.variant) v = x;
  ASSERT_EQ(v.name, k.variant);
  Transformer m(v.config, backend_of(k), k.master);
  m.init(21);
  RunOptions o;
  o.compute = k.master;
  m.prepare(1, kT, o);
  const std::vector<int32_t> a = random_tokens(kFirst, 1), b = random_tokens(kSecond, 2),
                             filler = random_tokens(kFirst, 3);
  const Row p = packed(a, b), s = alone(b, filler);
  const int64_t V = v.config.vocab_size;

  // Logits of b's tokens: packed at [kFirst, kT) with reset positions == alone at [0, kSecond).
  Tensor lp({kT, V}, k.master), ls({kT, V}, k.master), lp_row({kT, V}, k.master), lp_zero({kT, V}, k.master);
  m.logits(p.tokens.data(), p.doc_ids.data(), lp, p.positions.data());
  m.logits(s.tokens.data(), s.doc_ids.data(), ls);  // n % T: b starts at 0 anyway
  m.logits(p.tokens.data(), p.doc_ids.data(), lp_row);  // positions n % T: b starts at kFirst
  const std::vector<int32_t> zeros(kT, 0);
  m.logits(p.tokens.data(), p.doc_ids.data(), lp_zero, zeros.data());
  double worst_row = 0, worst_zero = 0;
  for (int64_t t = 0; t < kSecond; ++t)
    for (int64_t j = 0; j < V; ++j) {
      const double want = at(ls, t * V + j);
      ASSERT_NEAR(at(lp, (kFirst + t) * V + j), want, k.tol * (1 + std::abs(want)))
          << v.name << " token " << t << " of the second document, logit " << j;
      worst_row = std::max(worst_row, std::abs(at(lp_row, (kFirst + t) * V + j) - want));
      worst_zero = std::max(worst_zero, std::abs(at(lp_zero, (kFirst + t) * V + j) - want));
    }
  // The check can fail: the model reads the positions it is given (all zeros change the logits).
  EXPECT_GT(worst_zero, 1e-3) << "given positions were ignored";
  if (v.config.positions == PositionKind::kLearned) {
    // Learned positions: counted along the row, the second document reads other table rows.
    EXPECT_GT(worst_row, 1e-3) << "positions n % T gave the same logits";
  } else {
    // RoPE scores depend only on position differences, and document masking keeps them within one
    // document, so a shift of a whole document changes its logits by rounding only.
    EXPECT_LT(worst_row, 1e-4) << "RoPE with document masking should be shift-invariant";
  }

  // Loss and every gradient (backward reads the same given positions).
  m.zero_grads();
  const double loss_p = m.forward(p.tokens.data(), p.targets.data(), p.doc_ids.data(), true, 1.0f, p.positions.data());
  m.backward();
  std::vector<double> gp(m.grads().numel());
  for (int64_t i = 0; i < m.grads().numel(); ++i) gp[i] = at(m.grads(), i);
  m.zero_grads();
  const double loss_s = m.forward(s.tokens.data(), s.targets.data(), s.doc_ids.data(), true);
  m.backward();
  EXPECT_NEAR(loss_p, loss_s, k.tol * (1 + std::abs(loss_s)));
  for (int64_t i = 0; i < m.grads().numel(); ++i)
    ASSERT_NEAR(gp[i], at(m.grads(), i), k.tol * (1 + std::abs(at(m.grads(), i)))) << v.name << " gradient element " << i;
}

// A pass without positions after one with them is a pass with n % T again.
TEST_P(TransformerPositions, PassWithoutPositionsReturnsToRowPositions) {
  const Case& k = GetParam();
  testing::Variant v;
  for (const auto& x : testing::tiny_variants())
    if (x.name == k.variant) v = x;
  Transformer m(v.config, backend_of(k), k.master), fresh(v.config, backend_of(k), k.master);
  m.init(8);
  fresh.init(8);
  RunOptions o;
  o.compute = k.master;
  m.prepare(1, kT, o);
  fresh.prepare(1, kT, o);
  const Row p = packed(random_tokens(kFirst, 4), random_tokens(kSecond, 5));
  // No document masking, so RoPE sees the reset too.
  const double with = m.forward(p.tokens.data(), p.targets.data(), nullptr, false, 1.0f, p.positions.data());
  const double want = fresh.forward(p.tokens.data(), p.targets.data(), nullptr, false);
  EXPECT_NE(with, want) << "the given positions made no difference: the test could not fail";
  EXPECT_EQ(m.forward(p.tokens.data(), p.targets.data(), nullptr, false), want);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.variant) + "_" + std::string(info.param.backend) + "_" +
         std::string(dtype_name(info.param.master));
}

// RoPE (llama_gqa), learned positions (gpt2_style), partial RoPE with NoPE layers; the f64 oracle
// agrees to rounding, the fast backend to f32 accuracy (its attention tiles start elsewhere).
INSTANTIATE_TEST_SUITE_P(
    Variants, TransformerPositions,
    ::testing::Values(Case{"llama_gqa", DType::kF64, "ref", 1e-12},
                      Case{"gpt2_style", DType::kF64, "ref", 1e-12},
                      Case{"partial_rope_nope", DType::kF64, "ref", 1e-12},
                      Case{"llama_gqa", DType::kF32, "cpu", 2e-5},
                      Case{"gpt2_style", DType::kF32, "cpu", 2e-5}),
    case_name);

}  // namespace
}  // namespace lmt::model
