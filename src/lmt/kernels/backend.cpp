// Argument validation for every kernel entry point, shared by all backends.
#include "lmt/kernels/backend.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "lmt/base/bf16.h"
#include "lmt/base/trace.h"
#include "lmt/kernels/validate.h"

namespace lmt::kernels {

namespace {
// The trace range of one op. While tracing, the op is waited for (Backend::synchronize) before its
// range closes, so on a device backend, whose ops are queued, the profile splits device time by op
// rather than showing launch times; the waits serialise host and device, which a profile accepts.
// The cpu backends' synchronize does nothing. Not tracing: one relaxed load.
class OpTrace {
 public:
  OpTrace(Backend& be, const char* name) : be_(be), scope_(name) {}
  ~OpTrace() {
    if (Tracer::active()) be_.synchronize();
  }
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

 private:
  Backend& be_;
  TraceScope scope_;  // destroyed after the body above: the range ends once the op has finished
};
}  // namespace
#define LMT_OP_TRACE(name) OpTrace lmt_op_trace_(*this, name)

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kSilu: return "silu";
    case Activation::kRelu: return "relu";
  }
  return "?";
}

std::string_view attention_backend_name(AttentionBackend a) {
  return a == AttentionBackend::kNaive ? "naive" : "flash";
}

using namespace detail;  // Ctx, LMT_ARG, kAct, kGemmIn, acc_dtype_for (validate.h)

void Backend::matmul(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                     bool trans_b, bool accumulate) {
  LMT_OP_TRACE("op:gemm");
  Ctx x("matmul", LMT_ARG(c), LMT_ARG(a), LMT_ARG(b));
  x.dtype("a", a, kGemmIn);
  x.same_dtype("a", a, "b", b);
  x.require(c.dtype() == acc_dtype_for(a.dtype()), "c must be f32 (f64 for f64 inputs)");
  x.shape("a", a, {-1, -1});
  x.shape("b", b, {-1, -1});
  int64_t M = trans_a ? a.dim(1) : a.dim(0), K = trans_a ? a.dim(0) : a.dim(1);
  int64_t N = trans_b ? b.dim(0) : b.dim(1), Kb = trans_b ? b.dim(1) : b.dim(0);
  x.require(K == Kb, "inner dimensions differ: K=" + std::to_string(K) + " vs " + std::to_string(Kb) +
                         (trans_a ? " (a transposed)" : "") + (trans_b ? " (b transposed)" : ""));
  x.shape("c", c, {M, N});
  matmul_impl(c, a, b, trans_a, trans_b, accumulate);
}

namespace {
// The checks matmul_batched and matmul_batched_symmetric share (not c's shape); returns op(a)'s
// row count M and op(b)'s column count N.
std::pair<int64_t, int64_t> check_batched_gemm(Ctx& x, const TensorView& c, const TensorView& a, const TensorView& b,
                                               bool trans_a, bool trans_b) {
  x.dtype("a", a, kGemmIn);
  x.same_dtype("a", a, "b", b);
  x.shape("a", a, {-1, -1, -1});
  x.shape("b", b, {a.dim(0), -1, -1});
  int64_t M = trans_a ? a.dim(2) : a.dim(1), K = trans_a ? a.dim(1) : a.dim(2);
  int64_t N = trans_b ? b.dim(1) : b.dim(2), Kb = trans_b ? b.dim(2) : b.dim(1);
  x.require(K == Kb, "inner dimensions differ: K=" + std::to_string(K) + " vs " + std::to_string(Kb) +
                         (trans_a ? " (a transposed)" : "") + (trans_b ? " (b transposed)" : ""));
  x.require(c.dtype() == acc_dtype_for(a.dtype()), "c must be f32 (f64 for f64 inputs)");
  return {M, N};
}
}  // namespace

void Backend::matmul_batched(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                             bool trans_b, bool accumulate) {
  LMT_OP_TRACE("op:gemm");
  Ctx x("matmul_batched", LMT_ARG(c), LMT_ARG(a), LMT_ARG(b));
  const auto [M, N] = check_batched_gemm(x, c, a, b, trans_a, trans_b);
  x.shape("c", c, {a.dim(0), M, N});
  matmul_batched_impl(c, a, b, trans_a, trans_b, accumulate);
}

void Backend::matmul_batched_symmetric(const TensorView& c, const TensorView& a, const TensorView& b,
                                       bool trans_a, bool trans_b) {
  LMT_OP_TRACE("op:gemm");
  Ctx x("matmul_batched_symmetric", LMT_ARG(c), LMT_ARG(a), LMT_ARG(b));
  const auto [M, N] = check_batched_gemm(x, c, a, b, trans_a, trans_b);
  x.require(M == N, "a symmetric product is square: " + std::to_string(M) + " x " + std::to_string(N));
  x.shape("c", c, {a.dim(0), M, M});
  matmul_batched_symmetric_impl(c, a, b, trans_a, trans_b);
}

void Backend::matmul_batched_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                                  bool trans_b, bool accumulate) {
  auto item = [](const TensorView& t, int64_t i) {
    const Shape s{t.dim(1), t.dim(2)};
    char* base = static_cast<char*>(t.data()) + static_cast<size_t>(i * s.numel()) * dtype_size(t.dtype());
    return TensorView(base, s, t.dtype(), t.device());
  };
  for (int64_t i = 0; i < a.dim(0); ++i) matmul_impl(item(c, i), item(a, i), item(b, i), trans_a, trans_b, accumulate);
}

void Backend::linear_forward(const TensorView& out, const TensorView& inp, const TensorView& weight,
                             const TensorView& bias) {
  LMT_OP_TRACE("op:gemm");
  Ctx x("linear_forward", LMT_ARG(out), LMT_ARG(inp), LMT_ARG(weight), LMT_ARG(bias));
  x.dtype("inp", inp, kGemmIn);
  if (!(inp.dtype() == DType::kF32 && weight.dtype() == DType::kBF16))  // weight-only bf16 is allowed
    x.same_dtype("inp", inp, "weight", weight);
  DType acc = acc_dtype_for(inp.dtype());
  x.shape("inp", inp, {-1, -1});
  x.shape("weight", weight, {-1, inp.dim(1)});
  x.shape("out", out, {inp.dim(0), weight.dim(0)});
  x.require(out.dtype() == acc, "out must be f32 (f64 for f64 inputs)");
  if (bias.present()) {
    x.shape("bias", bias, {weight.dim(0)});
    x.require(bias.dtype() == acc, "bias must have out's dtype");
  }
  linear_forward_impl(out, inp, weight, bias);
}

void Backend::linear_backward(const TensorView& dinp, const TensorView& dweight,
                              const TensorView& dbias, const TensorView& dout,
                              const TensorView& inp, const TensorView& weight, GradWrite dweight_write) {
  Ctx x("linear_backward", LMT_ARG(dinp), LMT_ARG(dweight), LMT_ARG(dbias), LMT_ARG(dout),
        LMT_ARG(inp), LMT_ARG(weight));
  x.dtype("dout", dout, kGemmIn);
  x.same_dtype("dout", dout, "inp", inp);
  x.same_dtype("dout", dout, "weight", weight);
  DType acc = acc_dtype_for(dout.dtype());
  x.shape("inp", inp, {-1, -1});
  x.shape("weight", weight, {-1, inp.dim(1)});
  x.shape("dout", dout, {inp.dim(0), weight.dim(0)});
  if (dinp.present()) {
    x.shape("dinp", dinp, {inp.dim(0), inp.dim(1)});
    x.require(dinp.dtype() == acc, "dinp must be f32 (f64 for f64 inputs)");
  }
  if (dweight.present()) {
    x.shape("dweight", dweight, {weight.dim(0), weight.dim(1)});
    x.require(dweight.dtype() == acc, "dweight must be f32 (f64 for f64 inputs)");
  }
  if (dbias.present()) {
    x.shape("dbias", dbias, {weight.dim(0)});
    x.require(dbias.dtype() == acc, "dbias must be f32 (f64 for f64 inputs)");
  }
  // Two calls, so that a profile splits the input gradients' GEMMs from the weight gradients'.
  if (dinp.present()) {
    LMT_OP_TRACE("op:gemm_dx");
    linear_backward_impl(dinp, TensorView(), TensorView(), dout, inp, weight);
  }
  if (dweight.present() || dbias.present()) {
    LMT_OP_TRACE("op:gemm_dw");
    if (dweight.present() && dweight_write == GradWrite::kOverwrite) {
      linear_weight_grad_overwrite_impl(dweight, dout, inp, weight);
      if (dbias.present()) linear_backward_impl(TensorView(), TensorView(), dbias, dout, inp, weight);
    } else {
      linear_backward_impl(TensorView(), dweight, dbias, dout, inp, weight);
    }
  }
}

void Backend::linear_weight_grad_overwrite_impl(const TensorView& dweight, const TensorView& dout,
                                                const TensorView& inp, const TensorView& weight) {
  fill_impl(dweight, 0.0);
  linear_backward_impl(TensorView(), dweight, TensorView(), dout, inp, weight);
}

void Backend::embedding_forward(const TensorView& out, const TensorView& ids,
                                const TensorView& table, bool accumulate) {
  LMT_OP_TRACE("op:embedding");
  Ctx x("embedding_forward", LMT_ARG(out), LMT_ARG(ids), LMT_ARG(table));
  x.dtype("table", table, kAct);
  x.same_dtype("out", out, "table", table);
  x.dtype("ids", ids, {DType::kI32});
  x.shape("table", table, {-1, -1});
  x.shape("ids", ids, {-1});
  x.shape("out", out, {ids.dim(0), table.dim(1)});
  embedding_forward_impl(out, ids, table, accumulate);
}

void Backend::embedding_backward(const TensorView& dtable, const TensorView& dout,
                                 const TensorView& ids) {
  LMT_OP_TRACE("op:embedding");
  Ctx x("embedding_backward", LMT_ARG(dtable), LMT_ARG(dout), LMT_ARG(ids));
  x.dtype("dout", dout, kAct);
  x.same_dtype("dtable", dtable, "dout", dout);
  x.dtype("ids", ids, {DType::kI32});
  x.shape("dtable", dtable, {-1, -1});
  x.shape("ids", ids, {-1});
  x.shape("dout", dout, {ids.dim(0), dtable.dim(1)});
  embedding_backward_impl(dtable, dout, ids);
}

namespace {
// The forward norms' checks, shared with their fused residual-add forms: inp [N,C] of an activation
// dtype; out [N,C] of inp's dtype or bf16 (f32 inp); mean (optional: rmsnorm has none), rstd [N]
// and weight, bias (optional) [C] of inp's dtype.
void check_norm_forward(Ctx& x, const TensorView& out, const TensorView& mean, const TensorView& rstd,
                        const TensorView& inp, const TensorView& weight, const TensorView& bias, bool has_mean) {
  x.dtype("inp", inp, kAct);
  x.shape("inp", inp, {-1, -1});
  const int64_t N = inp.dim(0), C = inp.dim(1);
  x.out_dtype("inp", inp, "out", out);
  x.shape("out", out, {N, C});
  if (has_mean) {
    x.same_dtype("inp", inp, "mean", mean);
    x.shape("mean", mean, {N});
  }
  x.same_dtype("inp", inp, "rstd", rstd);
  x.shape("rstd", rstd, {N});
  x.same_dtype("inp", inp, "weight", weight);
  x.shape("weight", weight, {C});
  if (bias.present()) {
    x.shape("bias", bias, {C});
    x.same_dtype("inp", inp, "bias", bias);
  }
}

// sum = a + b feeding a norm: one dtype and shape; out (the norm's) overlaps none of them.
void check_residual_add(Ctx& x, const TensorView& sum, const TensorView& a, const TensorView& b,
                        const TensorView& out) {
  x.dtype("a", a, kAct);
  x.same_dtype("a", a, "b", b);
  x.same_dtype("a", a, "sum", sum);
  x.require(a.present() && b.present() && a.shape() == b.shape() && sum.shape() == a.shape(),
            "sum, a and b must have one shape");
  for (const TensorView* v : {&sum, &a, &b})
    x.require(out.data() != v->data(), "out must not alias sum, a or b");
}
}  // namespace

void Backend::layernorm_forward(const TensorView& out, const TensorView& mean,
                                const TensorView& rstd, const TensorView& inp,
                                const TensorView& weight, const TensorView& bias, float eps) {
  LMT_OP_TRACE("op:norm");
  Ctx x("layernorm_forward", LMT_ARG(out), LMT_ARG(mean), LMT_ARG(rstd), LMT_ARG(inp),
        LMT_ARG(weight), LMT_ARG(bias));
  check_norm_forward(x, out, mean, rstd, inp, weight, bias, /*has_mean=*/true);
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias, eps);
}

void Backend::add_layernorm_forward(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                    const TensorView& rstd, const TensorView& a, const TensorView& b,
                                    const TensorView& weight, const TensorView& bias, float eps) {
  LMT_OP_TRACE("op:norm");
  Ctx x("add_layernorm_forward", LMT_ARG(sum), LMT_ARG(out), LMT_ARG(mean), LMT_ARG(rstd), LMT_ARG(a),
        LMT_ARG(b), LMT_ARG(weight), LMT_ARG(bias));
  check_residual_add(x, sum, a, b, out);
  check_norm_forward(x, out, mean, rstd, sum, weight, bias, /*has_mean=*/true);
  add_layernorm_forward_impl(sum, out, mean, rstd, a, b, weight, bias, eps);
}

void Backend::add_layernorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                         const TensorView& rstd, const TensorView& a, const TensorView& b,
                                         const TensorView& weight, const TensorView& bias, float eps) {
  add_impl(sum, a, b);
  layernorm_forward_impl(out, mean, rstd, sum, weight, bias, eps);
}

void Backend::layernorm_backward(const TensorView& dinp, const TensorView& dweight,
                                 const TensorView& dbias, const TensorView& dout,
                                 const TensorView& inp, const TensorView& weight,
                                 const TensorView& mean, const TensorView& rstd, bool accumulate) {
  LMT_OP_TRACE("op:norm");
  Ctx x("layernorm_backward", LMT_ARG(dinp), LMT_ARG(dweight), LMT_ARG(dbias), LMT_ARG(dout),
        LMT_ARG(inp), LMT_ARG(weight), LMT_ARG(mean), LMT_ARG(rstd));
  x.dtype("inp", inp, kAct);
  x.shape("inp", inp, {-1, -1});
  int64_t N = inp.dim(0), C = inp.dim(1);
  for (auto [n, v] : {std::pair{"dinp", &dinp}, {"dweight", &dweight}, {"dout", &dout},
                      {"weight", &weight}, {"mean", &mean}, {"rstd", &rstd}})
    x.same_dtype("inp", inp, n, *v);
  x.shape("dinp", dinp, {N, C});
  x.shape("dout", dout, {N, C});
  x.shape("dweight", dweight, {C});
  x.shape("weight", weight, {C});
  x.shape("mean", mean, {N});
  x.shape("rstd", rstd, {N});
  if (dbias.present()) {
    x.shape("dbias", dbias, {C});
    x.same_dtype("inp", inp, "dbias", dbias);
  }
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, accumulate);
}

void Backend::rmsnorm_forward(const TensorView& out, const TensorView& rstd,
                              const TensorView& inp, const TensorView& weight, float eps) {
  LMT_OP_TRACE("op:norm");
  Ctx x("rmsnorm_forward", LMT_ARG(out), LMT_ARG(rstd), LMT_ARG(inp), LMT_ARG(weight));
  check_norm_forward(x, out, TensorView(), rstd, inp, weight, TensorView(), /*has_mean=*/false);
  rmsnorm_forward_impl(out, rstd, inp, weight, eps);
}

void Backend::add_rmsnorm_forward(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                  const TensorView& a, const TensorView& b, const TensorView& weight, float eps) {
  LMT_OP_TRACE("op:norm");
  Ctx x("add_rmsnorm_forward", LMT_ARG(sum), LMT_ARG(out), LMT_ARG(rstd), LMT_ARG(a), LMT_ARG(b), LMT_ARG(weight));
  check_residual_add(x, sum, a, b, out);
  check_norm_forward(x, out, TensorView(), rstd, sum, weight, TensorView(), /*has_mean=*/false);
  add_rmsnorm_forward_impl(sum, out, rstd, a, b, weight, eps);
}

void Backend::add_rmsnorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                       const TensorView& a, const TensorView& b, const TensorView& weight,
                                       float eps) {
  add_impl(sum, a, b);
  rmsnorm_forward_impl(out, rstd, sum, weight, eps);
}

void Backend::rmsnorm_backward(const TensorView& dinp, const TensorView& dweight,
                               const TensorView& dout, const TensorView& inp,
                               const TensorView& weight, const TensorView& rstd, bool accumulate) {
  LMT_OP_TRACE("op:norm");
  Ctx x("rmsnorm_backward", LMT_ARG(dinp), LMT_ARG(dweight), LMT_ARG(dout), LMT_ARG(inp),
        LMT_ARG(weight), LMT_ARG(rstd));
  x.dtype("inp", inp, kAct);
  x.shape("inp", inp, {-1, -1});
  int64_t N = inp.dim(0), C = inp.dim(1);
  for (auto [n, v] : {std::pair{"dinp", &dinp}, {"dweight", &dweight}, {"dout", &dout},
                      {"weight", &weight}, {"rstd", &rstd}})
    x.same_dtype("inp", inp, n, *v);
  x.shape("dinp", dinp, {N, C});
  x.shape("dout", dout, {N, C});
  x.shape("dweight", dweight, {C});
  x.shape("weight", weight, {C});
  x.shape("rstd", rstd, {N});
  rmsnorm_backward_impl(dinp, dweight, dout, inp, weight, rstd, accumulate);
}

void Backend::activation_forward(Activation act, const TensorView& out, const TensorView& inp) {
  LMT_OP_TRACE("op:activation");
  Ctx x("activation_forward", LMT_ARG(out), LMT_ARG(inp));
  x.dtype("inp", inp, kAct);
  x.out_dtype("inp", inp, "out", out);
  x.require(out.present() && inp.present() && out.shape() == inp.shape(), "out and inp must have one shape");
  activation_forward_impl(act, out, inp);
}

void Backend::activation_backward(Activation act, const TensorView& dinp, const TensorView& dout,
                                  const TensorView& inp) {
  LMT_OP_TRACE("op:activation");
  Ctx x("activation_backward", LMT_ARG(dinp), LMT_ARG(dout), LMT_ARG(inp));
  x.dtype("inp", inp, kAct);
  x.out_dtype("inp", inp, "dinp", dinp);
  x.same_dtype("inp", inp, "dout", dout);
  x.require(dinp.present() && dout.present() && inp.present() && dinp.shape() == inp.shape() &&
                dout.shape() == inp.shape(),
            "dinp, dout and inp must have one shape");
  activation_backward_impl(act, dinp, dout, inp);
}

void Backend::glu_forward(Activation act, const TensorView& out, const TensorView& inp) {
  LMT_OP_TRACE("op:activation");
  Ctx x("glu_forward", LMT_ARG(out), LMT_ARG(inp));
  x.dtype("inp", inp, kAct);
  x.out_dtype("inp", inp, "out", out);
  x.shape("out", out, {-1, -1});
  x.shape("inp", inp, {out.dim(0), 2 * out.dim(1)});
  glu_forward_impl(act, out, inp);
}

void Backend::glu_backward(Activation act, const TensorView& dinp, const TensorView& dout,
                           const TensorView& inp) {
  LMT_OP_TRACE("op:activation");
  Ctx x("glu_backward", LMT_ARG(dinp), LMT_ARG(dout), LMT_ARG(inp));
  x.dtype("inp", inp, kAct);
  x.out_dtype("inp", inp, "dinp", dinp);
  x.same_dtype("inp", inp, "dout", dout);
  x.shape("dout", dout, {-1, -1});
  x.shape("inp", inp, {dout.dim(0), 2 * dout.dim(1)});
  x.shape("dinp", dinp, {dout.dim(0), 2 * dout.dim(1)});
  glu_backward_impl(act, dinp, dout, inp);
}

namespace {
void check_rope(const Ctx& x, const TensorView& out, const TensorView& inp,
                const TensorView& positions, const RopeFreqs& freqs) {
  const int64_t rotary_dim = freqs.rotary_dim();
  x.dtype("inp", inp, kAct);
  x.same_dtype("inp", inp, "out", out);
  x.shape("inp", inp, {-1, -1, -1});
  x.shape("out", out, {inp.dim(0), inp.dim(1), inp.dim(2)});
  x.dtype("positions", positions, {DType::kI32});
  x.shape("positions", positions, {inp.dim(0)});
  x.require(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= inp.dim(2),
            "rotary_dim " + std::to_string(rotary_dim) + " must be even and in (0, HD=" +
                std::to_string(inp.dim(2)) + "]");
  for (double f : freqs.inv_freq) x.require(std::isfinite(f) && f >= 0, "inv_freq entries must be finite and >= 0");
  x.require(std::isfinite(freqs.attention_scaling) && freqs.attention_scaling > 0,
            "attention_scaling must be finite and > 0");
}
}  // namespace

RopeFreqs RopeFreqs::from_theta(double theta, int64_t rotary_dim) {
  RopeFreqs f;
  f.inv_freq.resize(static_cast<size_t>(rotary_dim / 2));
  for (int64_t i = 0; i < rotary_dim / 2; ++i) {
    f.inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
  }
  return f;
}

void Backend::rope_forward(const TensorView& out, const TensorView& inp,
                           const TensorView& positions, const RopeFreqs& freqs) {
  LMT_OP_TRACE("op:rope");
  Ctx x("rope_forward", LMT_ARG(out), LMT_ARG(inp), LMT_ARG(positions));
  check_rope(x, out, inp, positions, freqs);
  rope_impl(out, inp, positions, freqs, /*inverse=*/false);
}

void Backend::rope_backward(const TensorView& dinp, const TensorView& dout,
                            const TensorView& positions, const RopeFreqs& freqs) {
  LMT_OP_TRACE("op:rope");
  Ctx x("rope_backward", LMT_ARG(dinp), LMT_ARG(dout), LMT_ARG(positions));
  check_rope(x, dinp, dout, positions, freqs);
  rope_impl(dinp, dout, positions, freqs, /*inverse=*/true);
}

namespace {
void check_attention(const Ctx& x, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse, const TensorView& doc_ids, DType compute) {
  x.require(compute == DType::kF32 || compute == DType::kBF16,
            "compute must be f32 or bf16, got " + std::string(dtype_name(compute)));
  x.dtype("q", q, kAct);
  x.shape("q", q, {-1, -1, -1, -1});
  int64_t B = q.dim(0), T = q.dim(1), NH = q.dim(2), HD = q.dim(3);
  x.shape("k", k, {B, T, -1, HD});
  int64_t G = k.dim(2);
  x.require(G > 0 && NH % G == 0, "query heads NH=" + std::to_string(NH) +
                                      " must be a multiple of key/value heads G=" + std::to_string(G));
  x.shape("v", v, {B, T, G, HD});
  x.shape("out", out, {B, T, NH, HD});
  x.shape("lse", lse, {B, NH, T});
  for (auto [n, t] : {std::pair{"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}})
    x.same_dtype("q", q, n, *t);
  if (doc_ids.present()) {
    x.dtype("doc_ids", doc_ids, {DType::kI32});
    x.shape("doc_ids", doc_ids, {B, T});
  }
}
}  // namespace

void Backend::attention_forward(AttentionBackend backend, const TensorView& out,
                                const TensorView& lse, const TensorView& q, const TensorView& k,
                                const TensorView& v, const TensorView& doc_ids, float scale, DType compute) {
  LMT_OP_TRACE("op:attention");
  Ctx x("attention_forward", LMT_ARG(out), LMT_ARG(lse), LMT_ARG(q), LMT_ARG(k), LMT_ARG(v),
        LMT_ARG(doc_ids));
  check_attention(x, q, k, v, out, lse, doc_ids, compute);
  attention_forward_impl(backend, out, lse, q, k, v, doc_ids, scale, compute);
}

void Backend::attention_backward(AttentionBackend backend, const TensorView& dq,
                                 const TensorView& dk, const TensorView& dv,
                                 const TensorView& dout, const TensorView& q, const TensorView& k,
                                 const TensorView& v, const TensorView& out, const TensorView& lse,
                                 const TensorView& doc_ids, float scale, DType compute) {
  LMT_OP_TRACE("op:attention");
  Ctx x("attention_backward", LMT_ARG(dq), LMT_ARG(dk), LMT_ARG(dv), LMT_ARG(dout), LMT_ARG(q),
        LMT_ARG(k), LMT_ARG(v), LMT_ARG(out), LMT_ARG(lse), LMT_ARG(doc_ids));
  check_attention(x, q, k, v, out, lse, doc_ids, compute);
  for (auto [n, t, ref] : {std::tuple{"dq", &dq, &q}, {"dk", &dk, &k}, {"dv", &dv, &v}, {"dout", &dout, &out}}) {
    x.same_dtype("q", q, n, *t);
    x.require(t->present() && t->shape() == ref->shape(), std::string(n) + " must have the shape of its primal");
  }
  attention_backward_impl(backend, dq, dk, dv, dout, q, k, v, out, lse, doc_ids, scale, compute);
}

void Backend::attention_decode(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                               const TensorView& v_cache, int64_t length, float scale) {
  LMT_OP_TRACE("op:attention_decode");
  Ctx x("attention_decode", LMT_ARG(out), LMT_ARG(q), LMT_ARG(k_cache), LMT_ARG(v_cache));
  x.dtype("q", q, kAct);
  x.shape("q", q, {-1, -1, -1});
  const int64_t B = q.dim(0), NH = q.dim(1), HD = q.dim(2);
  x.shape("k_cache", k_cache, {B, -1, -1, HD});
  const int64_t S = k_cache.dim(1), G = k_cache.dim(2);
  x.require(G > 0 && NH % G == 0, "query heads NH=" + std::to_string(NH) +
                                      " must be a multiple of key/value heads G=" + std::to_string(G));
  x.shape("v_cache", v_cache, {B, S, G, HD});
  x.shape("out", out, {B, NH, HD});
  for (auto [n, t] : {std::pair{"k_cache", &k_cache}, {"v_cache", &v_cache}, {"out", &out}})
    x.same_dtype("q", q, n, *t);
  x.require(length >= 1 && length <= S, "length " + std::to_string(length) +
                                            " must be in [1, cache capacity S=" + std::to_string(S) + "]");
  attention_decode_impl(out, q, k_cache, v_cache, length, scale);
}

void Backend::attention_prefill(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                                const TensorView& v_cache, int64_t start, float scale) {
  Ctx x("attention_prefill", LMT_ARG(out), LMT_ARG(q), LMT_ARG(k_cache), LMT_ARG(v_cache));
  x.dtype("q", q, kAct);
  x.shape("q", q, {-1, -1, -1});
  const int64_t n = q.dim(0), NH = q.dim(1), HD = q.dim(2);
  x.shape("k_cache", k_cache, {1, -1, -1, HD});
  const int64_t S = k_cache.dim(1), G = k_cache.dim(2);
  x.require(G > 0 && NH % G == 0, "query heads NH=" + std::to_string(NH) +
                                      " must be a multiple of key/value heads G=" + std::to_string(G));
  x.shape("v_cache", v_cache, {1, S, G, HD});
  x.shape("out", out, {n, NH, HD});
  for (auto [name, t] : {std::pair{"k_cache", &k_cache}, {"v_cache", &v_cache}, {"out", &out}})
    x.same_dtype("q", q, name, *t);
  x.require(n >= 1 && start >= 0 && start + n <= S, "start " + std::to_string(start) + " + " + std::to_string(n) +
                                                        " new queries must fit the cache capacity S=" + std::to_string(S));
  attention_prefill_impl(out, q, k_cache, v_cache, start, scale);
}

void Backend::lm_head_cross_entropy(const TensorView& losses, const TensorView& x_in,
                                    const TensorView& weight, const TensorView& targets,
                                    const CrossEntropyOptions& opts, const TensorView& dx,
                                    const TensorView& dweight) {
  LMT_OP_TRACE("op:lm_head_loss");
  const TensorView& x = x_in;
  Ctx c("lm_head_cross_entropy", LMT_ARG(losses), LMT_ARG(x), LMT_ARG(weight), LMT_ARG(targets),
        LMT_ARG(dx), LMT_ARG(dweight));
  c.dtype("x", x, kGemmIn);
  c.same_dtype("x", x, "weight", weight);
  DType acc = acc_dtype_for(x.dtype());
  c.shape("x", x, {-1, -1});
  c.shape("weight", weight, {-1, x.dim(1)});
  c.shape("targets", targets, {x.dim(0)});
  c.dtype("targets", targets, {DType::kI32});
  c.shape("losses", losses, {x.dim(0)});
  c.require(losses.dtype() == acc, "losses must be f32 (f64 for f64 inputs)");
  c.require(opts.vocab_size > 0 && opts.vocab_size <= weight.dim(0),
            "vocab_size " + std::to_string(opts.vocab_size) + " must be in (0, rows of weight]");
  c.require(opts.chunk_rows > 0, "chunk_rows must be positive");
  if (dx.present()) {
    c.shape("dx", dx, {x.dim(0), x.dim(1)});
    c.require(dx.dtype() == acc, "dx must be f32 (f64 for f64 inputs)");
  }
  if (dweight.present()) {
    c.shape("dweight", dweight, {weight.dim(0), weight.dim(1)});
    c.require(dweight.dtype() == acc, "dweight must be f32 (f64 for f64 inputs)");
  }
  if (dweight.present() && opts.dweight_write == GradWrite::kOverwrite && !lm_head_writes_dweight_over()) {
    fill_impl(dweight.slice_rows(0, opts.vocab_size), 0.0);
    CrossEntropyOptions adding = opts;
    adding.dweight_write = GradWrite::kAccumulate;
    lm_head_cross_entropy_impl(losses, x, weight, targets, adding, dx, dweight);
    return;
  }
  lm_head_cross_entropy_impl(losses, x, weight, targets, opts, dx, dweight);
}

void Backend::add(const TensorView& out, const TensorView& a, const TensorView& b) {
  LMT_OP_TRACE("op:elementwise");
  Ctx x("add", LMT_ARG(out), LMT_ARG(a), LMT_ARG(b));
  x.dtype("a", a, kAct);
  x.same_dtype("a", a, "b", b);
  x.same_dtype("a", a, "out", out);
  x.require(out.present() && a.present() && b.present() && a.shape() == b.shape() &&
                out.shape() == a.shape(),
            "out, a and b must have one shape");
  add_impl(out, a, b);
}

void Backend::convert(const TensorView& out, const TensorView& inp) {
  LMT_OP_TRACE("op:convert");
  Ctx x("convert", LMT_ARG(out), LMT_ARG(inp));
  x.dtype("inp", inp, {DType::kF32, DType::kBF16, DType::kF64});
  x.dtype("out", out, {DType::kF32, DType::kBF16, DType::kF64});
  x.require(out.present() && inp.present() && out.numel() == inp.numel(), "out and inp must have one numel");
  convert_impl(out, inp);
}

double Backend::sum_squares(const TensorView& v) {
  LMT_OP_TRACE("op:reduce");
  Ctx x("sum_squares", LMT_ARG(v));
  x.dtype("x", v, kAct);
  x.require(v.present(), "x must be present");
  return sum_squares_impl(v);
}

void Backend::scale(const TensorView& v, float s) {
  LMT_OP_TRACE("op:elementwise");
  Ctx x("scale", LMT_ARG(v));
  x.dtype("x", v, kAct);
  x.require(v.present(), "x must be present");
  scale_impl(v, s);
}

void Backend::axpby(const TensorView& out, float alpha, const TensorView& v, float beta, const TensorView& y,
                    const TensorView& out_bf16) {
  LMT_OP_TRACE("op:elementwise");
  Ctx x("axpby", LMT_ARG(out), LMT_ARG(v), LMT_ARG(y), LMT_ARG(out_bf16));
  x.dtype("x", v, kAct);
  x.same_dtype("x", v, "y", y);
  x.same_dtype("x", v, "out", out);
  x.require(out.present() && v.present() && y.present() && v.numel() == out.numel() && y.numel() == out.numel(),
            "out, x and y must have one numel");
  if (out_bf16.present()) {
    x.dtype("out_bf16", out_bf16, {DType::kBF16});
    x.require(out_bf16.numel() == out.numel(), "out_bf16 must have out's numel");
  }
  axpby_impl(out, alpha, v, beta, y, out_bf16);
}

namespace {
template <typename T>
void axpby_loop(T* out, T alpha, const T* x, T beta, const T* y, bf16* out16, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = alpha * x[i] + beta * y[i];
    if (out16 != nullptr) out16[i] = bf16(static_cast<float>(out[i]));
  }
}
}  // namespace

void Backend::axpby_impl(const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
                         const TensorView& out_bf16) {
  bf16* out16 = out_bf16.present() ? out_bf16.as<bf16>() : nullptr;
  if (out.dtype() == DType::kF64)
    axpby_loop<double>(out.as<double>(), alpha, x.as<double>(), beta, y.as<double>(), out16, out.numel());
  else
    axpby_loop<float>(out.as<float>(), alpha, x.as<float>(), beta, y.as<float>(), out16, out.numel());
}

void Backend::adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m,
                           const TensorView& v, const TensorView& param_bf16, const AdamWParams& p) {
  LMT_OP_TRACE("op:optimizer");
  Ctx x("adamw_update", LMT_ARG(param), LMT_ARG(grad), LMT_ARG(m), LMT_ARG(v), LMT_ARG(param_bf16));
  x.dtype("param", param, kAct);
  for (auto [n, t] : {std::pair{"grad", &grad}, {"m", &m}, {"v", &v}}) {
    x.same_dtype("param", param, n, *t);
    x.require(t->present() && t->numel() == param.numel(), std::string(n) + " must have param's numel");
  }
  if (param_bf16.present()) {
    x.dtype("param_bf16", param_bf16, {DType::kBF16});
    x.require(param_bf16.numel() == param.numel(), "param_bf16 must have param's numel");
  }
  x.require(p.step >= 1, "step is 1-based");
  adamw_update_impl(param, grad, m, v, param_bf16, p);
}

void Backend::fill(const TensorView& t, double value) {
  LMT_OP_TRACE("op:elementwise");
  Ctx x("fill", LMT_ARG(t));
  x.dtype("x", t, {DType::kF32, DType::kF64, DType::kBF16, DType::kI32});
  x.require(t.present() || t.numel() == 0, "x must be present");
  if (t.dtype() == DType::kI32)
    x.require(value == static_cast<double>(static_cast<int32_t>(value)),
              "an i32 fill value must be an integer in range, got " + std::to_string(value));
  if (t.numel() > 0) fill_impl(t, value);
}

// copy() and copy_async()'s checks; true when nothing is left to do: nothing to copy, or a copy
// between two host views on a device backend (e.g. ZeRO's gathered optimizer state into a
// checkpoint's staging buffer), which the host has done. A device's copy kernel moves data to, from
// or within its own memory.
bool Backend::copy_done_here(const char* op, const TensorView& out, const TensorView& inp) {
  Ctx x(op, LMT_ARG(out), LMT_ARG(inp));
  x.same_dtype("out", out, "inp", inp);
  x.require(out.numel() == inp.numel(), "out and inp must have one numel");
  if (out.numel() == 0) return true;
  x.require(out.present() && inp.present(), "out and inp must be present");
  const char* o = static_cast<const char*>(out.data());
  const char* i = static_cast<const char*>(inp.data());
  x.require(out.device() != inp.device() || o + out.bytes() <= i || i + inp.bytes() <= o,
            "out and inp must not overlap");
  if (device().is_host() || !out.device().is_host() || !inp.device().is_host()) return false;
  std::memcpy(out.data(), inp.data(), inp.bytes());
  return true;
}

void Backend::copy(const TensorView& out, const TensorView& inp) {
  LMT_OP_TRACE("op:elementwise");
  if (!copy_done_here("copy", out, inp)) copy_impl(out, inp);
}

void Backend::copy_async(const TensorView& out, const TensorView& inp) {
  LMT_OP_TRACE("op:elementwise");
  if (!copy_done_here("copy_async", out, inp)) copy_async_impl(out, inp);
}

void Backend::snapshot_async(const TensorView& out, const TensorView& inp) {
  LMT_OP_TRACE("op:elementwise");
  if (!copy_done_here("snapshot_async", out, inp)) snapshot_async_impl(out, inp);
}

void Backend::positions(const TensorView& out, const TensorView& given, int64_t T) {
  LMT_OP_TRACE("op:elementwise");
  Ctx x("positions", LMT_ARG(out), LMT_ARG(given));
  x.dtype("out", out, {DType::kI32});
  x.shape("out", out, {-1});
  x.require(T > 0 && out.dim(0) % T == 0,
            "T=" + std::to_string(T) + " must be positive and divide N=" + std::to_string(out.dim(0)));
  if (given.present()) {
    x.dtype("given", given, {DType::kI32});
    x.shape("given", given, {out.dim(0)});
  }
  positions_impl(out, given, T);
}

int64_t Backend::count_valid_targets(const TensorView& targets, int32_t ignore_index) {
  LMT_OP_TRACE("op:reduce");
  Ctx x("count_valid_targets", LMT_ARG(targets));
  x.dtype("targets", targets, {DType::kI32});
  x.shape("targets", targets, {-1});
  return count_valid_targets_impl(targets, ignore_index);
}

double Backend::sum(const TensorView& v) {
  LMT_OP_TRACE("op:reduce");
  Ctx x("sum", LMT_ARG(v));
  x.dtype("x", v, kAct);
  x.require(v.present(), "x must be present");
  return sum_impl(v);
}

}  // namespace lmt::kernels
