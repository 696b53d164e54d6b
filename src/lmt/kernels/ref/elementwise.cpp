// ref: embedding, add, convert, sum of squares, scale, AdamW, fill, copy, positions, target count, sum.
#include <cmath>

#include "lmt/kernels/ref/access.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
using ref::acc;
using ref::ld;
using ref::st;

void RefBackend::embedding_forward_impl(const TensorView& out, const TensorView& ids,
                                        const TensorView& table, bool accumulate) {
  const int64_t N = ids.dim(0), V = table.dim(0), C = table.dim(1);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = ref::id(ids, n);
    LMT_CHECK(row >= 0 && row < V) << "embedding_forward: id " << row << " at " << n << " outside [0, " << V << ")";
    for (int64_t c = 0; c < C; ++c) {
      double e = ld(table, row * C + c);
      if (accumulate) acc(out, n * C + c, e); else st(out, n * C + c, e);
    }
  }
}

void RefBackend::embedding_backward_impl(const TensorView& dtable, const TensorView& dout,
                                         const TensorView& ids) {
  const int64_t N = ids.dim(0), V = dtable.dim(0), C = dtable.dim(1);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = ref::id(ids, n);
    LMT_CHECK(row >= 0 && row < V) << "embedding_backward: id " << row << " at " << n << " outside [0, " << V << ")";
    for (int64_t c = 0; c < C; ++c) acc(dtable, row * C + c, ld(dout, n * C + c));
  }
}

void RefBackend::add_impl(const TensorView& out, const TensorView& a, const TensorView& b) {
  for (int64_t i = 0; i < out.numel(); ++i) st(out, i, ld(a, i) + ld(b, i));
}

void RefBackend::convert_impl(const TensorView& out, const TensorView& inp) {
  for (int64_t i = 0; i < out.numel(); ++i) st(out, i, ld(inp, i));
}

double RefBackend::sum_squares_impl(const TensorView& x) {
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += ld(x, i) * ld(x, i);
  return s;
}

void RefBackend::scale_impl(const TensorView& x, float s) {
  for (int64_t i = 0; i < x.numel(); ++i) st(x, i, ld(x, i) * s);
}

void RefBackend::adamw_update_impl(const TensorView& param, const TensorView& grad,
                                   const TensorView& m, const TensorView& v,
                                   const TensorView& param_bf16, const AdamWParams& p) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  for (int64_t i = 0; i < param.numel(); ++i) {
    double g = ld(grad, i) * p.grad_scale;
    double mi = p.beta1 * ld(m, i) + (1.0 - p.beta1) * g;
    double vi = p.beta2 * ld(v, i) + (1.0 - p.beta2) * g * g;
    double w = ld(param, i);
    w -= p.lr * ((mi / bc1) / (std::sqrt(vi / bc2) + p.eps) + p.weight_decay * w);
    st(m, i, mi);
    st(v, i, vi);
    st(param, i, w);
    if (param_bf16.present()) st(param_bf16, i, static_cast<float>(ld(param, i)));
  }
}

void RefBackend::fill_impl(const TensorView& x, double value) {
  if (x.dtype() == DType::kI32) {
    for (int64_t i = 0; i < x.numel(); ++i) static_cast<int32_t*>(x.data())[i] = static_cast<int32_t>(value);
    return;
  }
  for (int64_t i = 0; i < x.numel(); ++i) st(x, i, value);
}

void RefBackend::copy_impl(const TensorView& out, const TensorView& inp) {
  const int64_t elem = static_cast<int64_t>(dtype_size(inp.dtype()));
  const unsigned char* src = static_cast<const unsigned char*>(inp.data());
  unsigned char* dst = static_cast<unsigned char*>(out.data());
  for (int64_t i = 0; i < inp.numel() * elem; ++i) dst[i] = src[i];
}

void RefBackend::positions_impl(const TensorView& out, const TensorView& given, int64_t T) {
  int32_t* pos = static_cast<int32_t*>(out.data());
  for (int64_t n = 0; n < out.numel(); ++n) {
    const int64_t p = given.present() ? ref::id(given, n) : n % T;
    LMT_CHECK(p >= 0 && p < T) << "positions: position " << p << " at " << n << " outside [0, T=" << T << ")";
    pos[n] = static_cast<int32_t>(p);
  }
}

int64_t RefBackend::count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) {
  int64_t count = 0;
  for (int64_t n = 0; n < targets.numel(); ++n) count += ref::id(targets, n) != ignore_index;
  return count;
}

double RefBackend::sum_impl(const TensorView& x) {
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += ld(x, i);
  return s;
}

}  // namespace lmt::kernels
