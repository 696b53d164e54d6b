// Pointwise activations and their derivatives, one f32 element at a time, as kernels/cuda/activation.cu
// applies them (and the host test compiles them unchanged against the ref backend's f64 loops).
//
//   gelu (tanh approximation): 0.5·x·(1 + tanh(u)),  u = sqrt(2/π)·(x + 0.044715·x³)
//   silu: x·σ(x);  relu: max(x, 0) with derivative 0 at x <= 0 (as ref).
//
// 0.5·(1 + tanh(u)) is evaluated as σ(2u) and 1 - tanh²(u) as 4·σ(2u)·(1 - σ(2u)), with σ and 1 - σ
// each taken from exp of a non-positive argument: f32 tanh loses all relative precision of 1 + tanh(u)
// for x below about -4, where gelu's value and slope are tiny but not zero.
#pragma once

#include <cmath>

#include "lmt/kernels/cuda/math/hd.h"

namespace lmt::kernels::cuda_math {

// The same enumerators and values as kernels::Activation (activation.cu static_asserts it); this
// header may not include backend.h, which the device compiler and the host test both avoid.
enum class Act : int { kGeluTanh = 0, kSilu = 1, kRelu = 2 };

// σ(z) and 1 - σ(z), both accurate to f32 rounding for any z (no 1 - x cancellation, no inf/inf).
LMT_HD void sigmoid_pair(float z, float& s, float& one_minus_s) {
  if (z >= 0.0f) {
    const float e = expf(-z);  // in (0, 1]
    s = 1.0f / (1.0f + e);
    one_minus_s = e * s;
  } else {
    const float e = expf(z);  // in (0, 1)
    one_minus_s = 1.0f / (1.0f + e);
    s = e * one_minus_s;
  }
}

LMT_HD float gelu_inner(float x) {
  const float kSqrt2OverPi = 0.7978845608028654f, kCoeff = 0.044715f;
  return kSqrt2OverPi * (x + kCoeff * x * x * x);
}

LMT_HD float gelu_tanh(float x) {
  float s, oms;
  sigmoid_pair(2.0f * gelu_inner(x), s, oms);
  return x * s;
}

LMT_HD float gelu_tanh_grad(float x) {
  const float kSqrt2OverPi = 0.7978845608028654f, kCoeff = 0.044715f;
  float s, oms;
  sigmoid_pair(2.0f * gelu_inner(x), s, oms);
  const float sech2 = 4.0f * s * oms;
  // sech² = 0 where |u| is huge; x·(1 + 3c·x²) may then be inf, and 0·inf would be NaN.
  const float slope = sech2 > 0.0f ? 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCoeff * x * x) : 0.0f;
  return s + slope;
}

LMT_HD float silu(float x) {
  float s, oms;
  sigmoid_pair(x, s, oms);
  return x * s;
}

LMT_HD float silu_grad(float x) {
  float s, oms;
  sigmoid_pair(x, s, oms);
  return s * (1.0f + x * oms);
}

LMT_HD float relu(float x) { return x > 0.0f ? x : 0.0f; }
LMT_HD float relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

// Compile-time dispatch for the kernels (one instantiation per activation, no per-element switch).
template <Act A>
LMT_HD float act_forward(float x) {
  if constexpr (A == Act::kGeluTanh)
    return gelu_tanh(x);
  else if constexpr (A == Act::kSilu)
    return silu(x);
  else
    return relu(x);
}
template <Act A>
LMT_HD float act_grad(float x) {
  if constexpr (A == Act::kGeluTanh)
    return gelu_tanh_grad(x);
  else if constexpr (A == Act::kSilu)
    return silu_grad(x);
  else
    return relu_grad(x);
}

// Run-time dispatch (the host test).
LMT_HD float act_forward(Act a, float x) {
  switch (a) {
    case Act::kGeluTanh:
      return gelu_tanh(x);
    case Act::kSilu:
      return silu(x);
    case Act::kRelu:
      return relu(x);
  }
  return 0.0f;
}
LMT_HD float act_grad(Act a, float x) {
  switch (a) {
    case Act::kGeluTanh:
      return gelu_tanh_grad(x);
    case Act::kSilu:
      return silu_grad(x);
    case Act::kRelu:
      return relu_grad(x);
  }
  return 0.0f;
}

// GLU of one element pair: out = act(g)·u; its gradient dg = d·u·act'(g), du = d·act(g).
template <Act A>
LMT_HD float glu_forward(float g, float u) {
  return act_forward<A>(g) * u;
}
template <Act A>
LMT_HD void glu_backward(float g, float u, float d, float& dg, float& du) {
  dg = d * u * act_grad<A>(g);
  du = d * act_forward<A>(g);
}

}  // namespace lmt::kernels::cuda_math
