// Microbenchmarks of the cpu backend's kernels (kernels::backend("cpu")) on transformer shapes
// (gpt2-124m: C=768, 4C=3072, V=50304).
//   build/bin/kernels_bench --benchmark_filter=Linear
#include <benchmark/benchmark.h>

#include <cmath>

#include "lmt/base/rng.h"
#include "lmt/kernels/backend.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace {
using lmt::DType;
using lmt::Shape;
using lmt::Tensor;
using lmt::TensorView;
namespace k = lmt::kernels;

Tensor random_tensor(Shape s, DType dtype, uint64_t seed) {
  lmt::Rng rng(seed);
  Tensor f(s, DType::kF32);
  for (int64_t i = 0; i < f.numel(); ++i) f.as<float>()[i] = static_cast<float>(rng.normal());
  if (dtype == DType::kF32) return f;
  Tensor out(s, dtype);
  k::backend("cpu").convert(out, f);
  return out;
}

// y[M,N] = x[M,K] · W[N,K]ᵀ; args: M, K, N, bf16?
void BM_LinearForward(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const DType dt = state.range(3) ? DType::kBF16 : DType::kF32;
  Tensor x = random_tensor({M, K}, dt, 1), w = random_tensor({N, K}, dt, 2), y({M, N}, DType::kF32);
  k::Backend& be = k::backend("cpu");
  for (auto _ : state) be.linear_forward(y, x, w, TensorView());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * K * N, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"].value *= 1e-9;
}
BENCHMARK(BM_LinearForward)
    ->ArgsProduct({{2048}, {768}, {768, 3072}, {0, 1}})
    ->Args({2048, 3072, 768, 1})
    ->Unit(benchmark::kMillisecond);

// Causal attention forward+backward; args: T, flash?
void BM_Attention(benchmark::State& state) {
  const int64_t B = 4, NH = 12, T = state.range(0), HD = 64;
  const auto which = state.range(1) ? k::AttentionBackend::kFlash : k::AttentionBackend::kNaive;
  Tensor q = random_tensor({B, T, NH, HD}, DType::kF32, 1), kk = random_tensor({B, T, NH, HD}, DType::kF32, 2),
         v = random_tensor({B, T, NH, HD}, DType::kF32, 3), dout = random_tensor({B, T, NH, HD}, DType::kF32, 4);
  Tensor out({B, T, NH, HD}, DType::kF32), lse({B, NH, T}, DType::kF32), dq({B, T, NH, HD}, DType::kF32),
      dk({B, T, NH, HD}, DType::kF32), dv({B, T, NH, HD}, DType::kF32);
  const float scale = 1.0f / std::sqrt(64.0f);
  k::Backend& be = k::backend("cpu");
  for (auto _ : state) {
    be.attention_forward(which, out, lse, q, kk, v, TensorView(), scale);
    be.attention_backward(which, dq, dk, dv, dout, q, kk, v, out, lse, TensorView(), scale);
  }
}
BENCHMARK(BM_Attention)->ArgsProduct({{256, 1024}, {0, 1}})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
