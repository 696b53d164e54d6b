// streamed_lm_head_loss (model/streamed_head.h) against the one-pass Backend::lm_head_cross_entropy
// over the whole LM head: the losses, dx and the weight gradient, in f32 and bf16, with the z-loss
// and ignored targets, for chunks of 1 row up to more rows than the vocabulary (one chunk), and for
// an evaluation pass (no gradients). The vocabulary source here copies row ranges of one whole
// weight into a buffer of their own (so the head can read nothing else) and checks the protocol of
// model/streamed_vocab.h; train/zero3.h is the real one (tests/dist/zero3_test.cpp runs it over MPI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/streamed_head.h"

namespace lmt::model {
namespace {

constexpr int64_t kN = 37, kC = 16, kV = 50, kVp = 64;  // rows, width, vocabulary, padded rows

class RowsOfOneWeight final : public StreamedVocab {
 public:
  RowsOfOneWeight(kernels::Backend& b, const Tensor& w, int64_t rows, Tensor& dw)
      : b_(b), w_(w), rows_(rows), dw_(dw), ready_((kV + rows - 1) / rows, 0) {}
  int64_t head_chunk_rows() const override { return rows_; }
  void embed(const TensorView&, const TensorView&) override { ADD_FAILURE() << "the head never embeds"; }
  void embed_backward(const TensorView&, const TensorView&) override { ADD_FAILURE() << "the head never embeds"; }
  TensorView head_rows(int64_t k, int64_t next) override {
    EXPECT_LT(grad_for_, 0) << "head_rows() before head_grad_ready(" << grad_for_ << ")";
    EXPECT_TRUE(next == -1 || (next >= 0 && next < chunks())) << next;
    const int64_t v0 = k * rows_, n = std::min(rows_, kV - v0);
    chunk_ = Tensor({n, kC}, w_.dtype());
    b_.copy(chunk_.view(), w_.view().slice_rows(v0, v0 + n));
    return chunk_.view();
  }
  TensorView head_grad(int64_t k) override {
    const int64_t n = std::min(rows_, kV - k * rows_);
    grad_ = Tensor({n, kC}, DType::kF32);
    b_.fill(grad_.view(), 0.0);
    grad_for_ = k;
    return grad_.view();
  }
  void head_grad_ready(int64_t k) override {
    EXPECT_EQ(k, grad_for_);
    const int64_t v0 = k * rows_;
    float* to = dw_.as<float>() + v0 * kC;
    for (int64_t i = 0; i < grad_.numel(); ++i) to[i] += grad_.as<float>()[i];
    ++ready_[static_cast<size_t>(k)];
    grad_for_ = -1;
  }
  int64_t chunks() const { return static_cast<int64_t>(ready_.size()); }
  const std::vector<int>& ready() const { return ready_; }

 private:
  kernels::Backend& b_;
  const Tensor& w_;
  int64_t rows_;
  Tensor& dw_;
  Tensor chunk_, grad_;
  int64_t grad_for_ = -1;
  std::vector<int> ready_;
};

Tensor random(Shape s, DType dt, kernels::Backend& b, uint64_t seed, double std) {
  Tensor f({s.numel()}, DType::kF32);
  Rng rng(seed);
  for (int64_t i = 0; i < f.numel(); ++i) f.as<float>()[i] = static_cast<float>(rng.normal() * std);
  Tensor t(s, dt);
  if (dt == DType::kF32) b.copy(t.view(), f.view().reshape(s));
  else b.convert(t.view(), f.view().reshape(s));
  return t;
}

// max |a - b| <= tol · max |a|
void expect_close(const TensorView& a, const TensorView& b, double tol, const char* what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  double scale = 0, worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    scale = std::max(scale, std::abs(double(a.as<float>()[i])));
    const double d = std::abs(double(a.as<float>()[i]) - b.as<float>()[i]);
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, tol * scale) << what << " at " << at << ": " << a.as<float>()[at] << " vs " << b.as<float>()[at];
}

TEST(StreamedHead, EqualsTheOnePassHeadForEveryChunkSize) {
  kernels::Backend& b = kernels::backend("cpu");
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int64_t rows : {1, 7, 24, 49, 50, 64})
      for (bool train : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + ", " + std::to_string(rows) + " rows per chunk, " +
                     (train ? "training" : "evaluation"));
        const Tensor x = random({kN, kC}, dt, b, 1, 1.0);
        const Tensor w = random({kVp, kC}, dt, b, 2, 0.5);
        Tensor targets({kN}, DType::kI32);
        for (int64_t n = 0; n < kN; ++n) targets.as<int32_t>()[n] = n % 9 == 4 ? -100 : static_cast<int32_t>((n * 13 + 5) % kV);
        kernels::CrossEntropyOptions o;
        o.vocab_size = kV;
        o.z_loss = 1e-3f;
        o.grad_scale = 1.0f / 33;
        o.chunk_rows = 8;  // several row chunks per call: combine() sees row0 > 0
        Tensor loss_ref({kN}, DType::kF32), dx_ref({kN, kC}, DType::kF32), dw_ref({kVp, kC}, DType::kF32);
        b.fill(dw_ref.view(), 0.0);
        b.lm_head_cross_entropy(loss_ref.view(), x.view(), w.view(), targets.view(), o, train ? dx_ref.view() : TensorView(),
                                train ? dw_ref.view() : TensorView());

        Tensor loss({kN}, DType::kF32), dx({kN, kC}, DType::kF32), dw({kVp, kC}, DType::kF32);
        b.fill(dw.view(), 0.0);
        RowsOfOneWeight vocab(b, w, rows, dw);
        StreamedHeadScratch scratch;
        streamed_lm_head_loss(b, vocab, kV, loss.view(), x.view(), targets.view(), o, train ? dx.view() : TensorView(), scratch);

        expect_close(loss_ref.view(), loss.view(), 1e-6, "losses");
        for (int64_t n = 0; n < kN; ++n) {
          if (targets.as<int32_t>()[n] == -100) {
            EXPECT_EQ(loss.as<float>()[n], 0.0f) << "ignored row " << n;
          }
        }
        for (int64_t k = 0; k < vocab.chunks(); ++k)
          EXPECT_EQ(vocab.ready()[static_cast<size_t>(k)], train ? 1 : 0) << "chunk " << k << "'s gradient handed back";
        if (!train) continue;
        // bf16: dlogits are rounded to bf16 for the GEMMs after the softmax, whose log-sum-exp the
        // chunks combine with different f32 rounding: an element may round to the next bf16.
        const double tol = dt == DType::kF32 ? 1e-5 : 1e-2;
        expect_close(dx_ref.view(), dx.view(), tol, "dx");
        expect_close(dw_ref.view(), dw.view(), tol, "d weight");
        for (int64_t i = kV * kC; i < kVp * kC; ++i) ASSERT_EQ(dw.as<float>()[i], 0.0f) << "padding rows get no gradient";
      }
}

}  // namespace
}  // namespace lmt::model
