// cpu: pointwise activations (gelu-tanh, silu, relu) and gated linear units, forward and backward.
//
// Each activation is written once as a function giving act(x) and act'(x) together, in an AVX-512
// form (16 lanes, masked tails), its AVX2 twin (8 lanes, the same operations) and a scalar form;
// the four kernels are templates over it, so the compiler drops whichever half a kernel does not
// use. Both smooth activations go through one sigmoid (tanh(u) = 2·sigmoid(2u) - 1) built on
// simd::exp16 / exp8 (~2e-7 relative); 1 - sigmoid is
// formed without cancellation, which keeps the results within a few ulp of the f64 reference.
#include <algorithm>
#include <cmath>

#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"
#include "lmt/kernels/cpu/vector_loop.h"

namespace lmt::kernels {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;
// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

// sigmoid(z) and 1 - sigmoid(z). The latter is e·s with e = exp(-z), not 1 - s, which would lose
// all its digits where s is near 1 (that is where the derivatives need it). e is capped so that
// e·s stays finite (as exp16 does).
struct Sigmoid {
  float s, one_minus_s;
  explicit Sigmoid(float z) {
    const float e = std::exp(std::min(-z, 88.0f));
    s = 1.0f / (1.0f + e);
    one_minus_s = e * s;
  }
};
#ifdef __AVX512F__
struct Sigmoid16 {
  __m512 s, one_minus_s;
  explicit Sigmoid16(__m512 z) {
    const __m512 e = simd::exp16(_mm512_sub_ps(_mm512_setzero_ps(), z));
    s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    one_minus_s = _mm512_mul_ps(e, s);
  }
};
#elif defined(LMT_SIMD_AVX2)
struct Sigmoid8 {  // Sigmoid16 on 8 lanes
  __m256 s, one_minus_s;
  explicit Sigmoid8(__m256 z) {
    const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
    s = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    one_minus_s = _mm256_mul_ps(e, s);
  }
};
#endif

// gelu(x) = 0.5·x·(1 + tanh(u)) = x·s with u = k·(x + c·x³), s = sigmoid(2u);
// gelu'(x) = s + 2·x·s·(1 - s)·k·(1 + 3c·x²)   (since 1 - tanh²(u) = 4·s·(1 - s)).
struct GeluTanh {
  static void eval(float x, float* f, float* df) {
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    const Sigmoid sg(2.0f * u);
    *f = x * sg.s;
    *df = sg.s + 2.0f * x * sg.s * sg.one_minus_s * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  }
#ifdef __AVX512F__
  static void eval(__m512 x, __m512* f, __m512* df) {
    const __m512 one = _mm512_set1_ps(1.0f), k = _mm512_set1_ps(kSqrt2OverPi);
    const __m512 x2 = _mm512_mul_ps(x, x);
    const __m512 u = _mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(kGeluCoeff), x2), x, x));
    const Sigmoid16 sg(_mm512_add_ps(u, u));
    *f = _mm512_mul_ps(x, sg.s);
    const __m512 du = _mm512_mul_ps(k, _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kGeluCoeff), x2, one));
    const __m512 ds = _mm512_mul_ps(_mm512_mul_ps(sg.s, sg.one_minus_s), du);
    *df = _mm512_fmadd_ps(_mm512_add_ps(x, x), ds, sg.s);
  }
#elif defined(LMT_SIMD_AVX2)
  static void eval(__m256 x, __m256* f, __m256* df) {
    const __m256 one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(kSqrt2OverPi);
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 u = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kGeluCoeff), x2), x, x));
    const Sigmoid8 sg(_mm256_add_ps(u, u));
    *f = _mm256_mul_ps(x, sg.s);
    const __m256 du = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluCoeff), x2, one));
    const __m256 ds = _mm256_mul_ps(_mm256_mul_ps(sg.s, sg.one_minus_s), du);
    *df = _mm256_fmadd_ps(_mm256_add_ps(x, x), ds, sg.s);
  }
#endif
};

// silu(x) = x·s with s = sigmoid(x); silu'(x) = s·(1 + x·(1 - s)).
struct Silu {
  static void eval(float x, float* f, float* df) {
    const Sigmoid sg(x);
    *f = x * sg.s;
    *df = sg.s * (1.0f + x * sg.one_minus_s);
  }
#ifdef __AVX512F__
  static void eval(__m512 x, __m512* f, __m512* df) {
    const Sigmoid16 sg(x);
    *f = _mm512_mul_ps(x, sg.s);
    *df = _mm512_mul_ps(sg.s, _mm512_fmadd_ps(x, sg.one_minus_s, _mm512_set1_ps(1.0f)));
  }
#elif defined(LMT_SIMD_AVX2)
  static void eval(__m256 x, __m256* f, __m256* df) {
    const Sigmoid8 sg(x);
    *f = _mm256_mul_ps(x, sg.s);
    *df = _mm256_mul_ps(sg.s, _mm256_fmadd_ps(x, sg.one_minus_s, _mm256_set1_ps(1.0f)));
  }
#endif
};

// relu(x) = x > 0 ? x : 0 (NaN gives 0, as in the ref); relu'(x) = x > 0 ? 1 : 0.
struct Relu {
  static void eval(float x, float* f, float* df) {
    *f = x > 0.0f ? x : 0.0f;
    *df = x > 0.0f ? 1.0f : 0.0f;
  }
#ifdef __AVX512F__
  static void eval(__m512 x, __m512* f, __m512* df) {
    const __mmask16 positive = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
    *f = _mm512_maskz_mov_ps(positive, x);
    *df = _mm512_maskz_mov_ps(positive, _mm512_set1_ps(1.0f));
  }
#elif defined(LMT_SIMD_AVX2)
  static void eval(__m256 x, __m256* f, __m256* df) {
    const __m256 positive = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
    *f = _mm256_and_ps(positive, x);
    *df = _mm256_and_ps(positive, _mm256_set1_ps(1.0f));
  }
#endif
};

// out[i] = act(x[i]) for i in [0, n).
template <typename Act>
void forward_span(float* out, const float* x, int64_t n) {
#ifdef __AVX512F__
  simd::for_each_vector(n, [&](int64_t i, __mmask16 m) {
    __m512 f, df;
    Act::eval(_mm512_maskz_loadu_ps(m, x + i), &f, &df);
    _mm512_mask_storeu_ps(out + i, m, f);
  });
#elif defined(LMT_SIMD_AVX2)
  simd::for_each_vector8(n, [&](int64_t i, int lanes) {
    __m256 f, df;
    Act::eval(simd::load8(x + i, lanes), &f, &df);
    simd::store8(out + i, lanes, f);
  });
#else
  for (int64_t i = 0; i < n; ++i) {
    float df;
    Act::eval(x[i], &out[i], &df);
  }
#endif
}

// dinp[i] = dout[i]·act'(x[i]).
template <typename Act>
void backward_span(float* dinp, const float* dout, const float* x, int64_t n) {
#ifdef __AVX512F__
  simd::for_each_vector(n, [&](int64_t i, __mmask16 m) {
    __m512 f, df;
    Act::eval(_mm512_maskz_loadu_ps(m, x + i), &f, &df);
    _mm512_mask_storeu_ps(dinp + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dout + i), df));
  });
#elif defined(LMT_SIMD_AVX2)
  simd::for_each_vector8(n, [&](int64_t i, int lanes) {
    __m256 f, df;
    Act::eval(simd::load8(x + i, lanes), &f, &df);
    simd::store8(dinp + i, lanes, _mm256_mul_ps(simd::load8(dout + i, lanes), df));
  });
#else
  for (int64_t i = 0; i < n; ++i) {
    float f, df;
    Act::eval(x[i], &f, &df);
    dinp[i] = dout[i] * df;
  }
#endif
}

// out[h] = act(gate[h])·up[h].
template <typename Act>
void glu_forward_row(float* out, const float* gate, const float* up, int64_t H) {
#ifdef __AVX512F__
  simd::for_each_vector(H, [&](int64_t h, __mmask16 m) {
    __m512 f, df;
    Act::eval(_mm512_maskz_loadu_ps(m, gate + h), &f, &df);
    _mm512_mask_storeu_ps(out + h, m, _mm512_mul_ps(f, _mm512_maskz_loadu_ps(m, up + h)));
  });
#elif defined(LMT_SIMD_AVX2)
  simd::for_each_vector8(H, [&](int64_t h, int lanes) {
    __m256 f, df;
    Act::eval(simd::load8(gate + h, lanes), &f, &df);
    simd::store8(out + h, lanes, _mm256_mul_ps(f, simd::load8(up + h, lanes)));
  });
#else
  for (int64_t h = 0; h < H; ++h) {
    float f, df;
    Act::eval(gate[h], &f, &df);
    out[h] = f * up[h];
  }
#endif
}

// dgate[h] = dout[h]·up[h]·act'(gate[h]);  dup[h] = dout[h]·act(gate[h]).
template <typename Act>
void glu_backward_row(float* dgate, float* dup, const float* dout, const float* gate,
                      const float* up, int64_t H) {
#ifdef __AVX512F__
  simd::for_each_vector(H, [&](int64_t h, __mmask16 m) {
    __m512 f, df;
    Act::eval(_mm512_maskz_loadu_ps(m, gate + h), &f, &df);
    const __m512 d = _mm512_maskz_loadu_ps(m, dout + h);
    _mm512_mask_storeu_ps(dgate + h, m, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, up + h)), df));
    _mm512_mask_storeu_ps(dup + h, m, _mm512_mul_ps(d, f));
  });
#elif defined(LMT_SIMD_AVX2)
  simd::for_each_vector8(H, [&](int64_t h, int lanes) {
    __m256 f, df;
    Act::eval(simd::load8(gate + h, lanes), &f, &df);
    const __m256 d = simd::load8(dout + h, lanes);
    simd::store8(dgate + h, lanes, _mm256_mul_ps(_mm256_mul_ps(d, simd::load8(up + h, lanes)), df));
    simd::store8(dup + h, lanes, _mm256_mul_ps(d, f));
  });
#else
  for (int64_t h = 0; h < H; ++h) {
    float f, df;
    Act::eval(gate[h], &f, &df);
    dgate[h] = dout[h] * up[h] * df;
    dup[h] = dout[h] * f;
  }
#endif
}

// Calls fn.template operator()<ActStruct>() for the runtime activation.
template <typename Fn>
void dispatch(Activation act, const Fn& fn) {
  switch (act) {
    case Activation::kGeluTanh: fn.template operator()<GeluTanh>(); return;
    case Activation::kSilu: fn.template operator()<Silu>(); return;
    case Activation::kRelu: fn.template operator()<Relu>(); return;
  }
}

// Multiple of 16: every block but the last is whole vectors. Also the staging length of bf16 outputs.
constexpr int64_t kBlock = 4096;

// Runs fn(begin, end) over [0, n) in cache-friendly blocks of at most kBlock spread over the threads.
template <typename Fn>
void parallel_blocks(int64_t n, const Fn& fn) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) fn(b * kBlock, std::min(n, (b + 1) * kBlock));
}

}  // namespace

// bf16 outputs (backend.h): each block or row segment is computed into f32 on the stack, then
// rounded by the same conversion as convert(), so the bits equal convert() of the f32 output.
namespace {
uint16_t* bf16_out(const TensorView& t) {
  return t.dtype() == DType::kBF16 ? static_cast<uint16_t*>(t.data()) : nullptr;
}
}  // namespace

void CpuBackend::activation_forward_impl(Activation act, const TensorView& out,
                                         const TensorView& inp) {
  cpu_require_f32("activation_forward", inp);
  uint16_t* y16 = bf16_out(out);
  float* y = y16 != nullptr ? nullptr : out.as<float>();
  const float* x = inp.as<float>();
  dispatch(act, [&]<typename Act>() {
    parallel_blocks(inp.numel(), [&](int64_t b, int64_t e) {
      if (y16 == nullptr) return forward_span<Act>(y + b, x + b, e - b);
      float staged[kBlock];
      forward_span<Act>(staged, x + b, e - b);
      cpu_f32_to_bf16(y16 + b, staged, e - b);
    });
  });
}

void CpuBackend::activation_backward_impl(Activation act, const TensorView& dinp,
                                          const TensorView& dout, const TensorView& inp) {
  cpu_require_f32("activation_backward", inp);
  uint16_t* dx16 = bf16_out(dinp);
  float* dx = dx16 != nullptr ? nullptr : dinp.as<float>();
  const float *g = dout.as<float>(), *x = inp.as<float>();
  dispatch(act, [&]<typename Act>() {
    parallel_blocks(inp.numel(), [&](int64_t b, int64_t e) {
      if (dx16 == nullptr) return backward_span<Act>(dx + b, g + b, x + b, e - b);
      float staged[kBlock];
      backward_span<Act>(staged, g + b, x + b, e - b);
      cpu_f32_to_bf16(dx16 + b, staged, e - b);
    });
  });
}

void CpuBackend::glu_forward_impl(Activation act, const TensorView& out, const TensorView& inp) {
  cpu_require_f32("glu_forward", inp);
  const int64_t N = out.dim(0), H = out.dim(1);
  uint16_t* y16 = bf16_out(out);
  float* y = y16 != nullptr ? nullptr : out.as<float>();
  const float* x = inp.as<float>();
  dispatch(act, [&]<typename Act>() {
#pragma omp parallel for schedule(static) if (N * H >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const float* gate = x + n * 2 * H;
      if (y16 == nullptr) {
        glu_forward_row<Act>(y + n * H, gate, gate + H, H);
        continue;
      }
      float staged[kBlock];
      for (int64_t h = 0; h < H; h += kBlock) {
        const int64_t len = std::min(kBlock, H - h);
        glu_forward_row<Act>(staged, gate + h, gate + H + h, len);
        cpu_f32_to_bf16(y16 + n * H + h, staged, len);
      }
    }
  });
}

void CpuBackend::glu_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                   const TensorView& inp) {
  cpu_require_f32("glu_backward", inp);
  const int64_t N = dout.dim(0), H = dout.dim(1);
  uint16_t* dx16 = bf16_out(dinp);
  float* dx = dx16 != nullptr ? nullptr : dinp.as<float>();
  const float *g = dout.as<float>(), *x = inp.as<float>();
  dispatch(act, [&]<typename Act>() {
#pragma omp parallel for schedule(static) if (N * H >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const float* row = x + n * 2 * H;
      if (dx16 == nullptr) {
        glu_backward_row<Act>(dx + n * 2 * H, dx + n * 2 * H + H, g + n * H, row, row + H, H);
        continue;
      }
      float staged_gate[kBlock], staged_up[kBlock];
      for (int64_t h = 0; h < H; h += kBlock) {
        const int64_t len = std::min(kBlock, H - h);
        glu_backward_row<Act>(staged_gate, staged_up, g + n * H + h, row + h, row + H + h, len);
        cpu_f32_to_bf16(dx16 + n * 2 * H + h, staged_gate, len);
        cpu_f32_to_bf16(dx16 + n * 2 * H + H + h, staged_up, len);
      }
    }
  });
}

}  // namespace lmt::kernels
