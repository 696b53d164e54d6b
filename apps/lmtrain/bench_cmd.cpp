// `lmtrain bench matmul` and `lmtrain bench attention`: kernel throughput on this machine, on the
// kernel backend --backend names (default cpu).
//
// Each benchmark warms up, then times `--iters` repetitions and reports the median (timings on
// shared machines are noisy; the median of several is what docs/PERFORMANCE.md records), the best,
// GFLOP/s and the fraction of this machine's measured peak (metrics/peaks.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/rng.h"
#include "lmt/kernels/backend.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peaks.h"
#include "lmt/tensor/compute_dtype.h"
#include "lmt/tensor/tensor.h"

namespace lmt::cli {
namespace {

// A zero-filled tensor where `be` computes.
Tensor zeros(kernels::Backend& be, Shape shape, DType dtype) { return Tensor(shape, dtype, be.allocator()); }

// Normal(0, scale²) values made on the host, then placed where `be` computes (in `dtype`).
Tensor random_tensor(kernels::Backend& be, Shape shape, DType dtype, Rng& rng, double scale = 1.0) {
  Tensor host(shape, DType::kF32);
  float* p = host.as<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = static_cast<float>(rng.normal() * scale);
  Tensor f32 = zeros(be, shape, DType::kF32);
  be.copy(f32, host);
  if (dtype == DType::kF32) return f32;
  Tensor out = zeros(be, shape, dtype);
  be.convert(out, f32);
  return out;
}

struct MatmulArgs {
  int64_t m = 2048, k = 768, n = 3072;
  std::string dtype = "bf16";
  std::string form = "plain";
  std::string backend = "cpu";
  int warmup = 3, iters = 10;
  bool json = false;
  bool cold = false;
};

// Writes and reads 64 MiB (twice a 32 MiB L3) so that a GEMM's operands next come from memory,
// as in a training step, where each layer's weights were last touched a step ago.
void evict_caches() {
  static std::vector<float> junk(16 << 20);
  float sum = 0;
  for (size_t i = 0; i < junk.size(); i += 16) sum += junk[i] += 1.0f;
  static volatile float sink = 0;
  sink = sink + sum;
}

Status run_matmul(const MatmulArgs& a) {
  LMT_ASSIGN_OR_RETURN(DType dtype, parse_compute_dtype(a.dtype, "--dtype"));
  if (a.m <= 0 || a.k <= 0 || a.n <= 0)
    return InvalidArgument("--m, --k and --n must be positive", "e.g. --m 2048 --k 768 --n 3072");
  for (const auto& [flag, v] : {std::pair{"--m", a.m}, {"--k", a.k}, {"--n", a.n}})
    LMT_RETURN_IF_ERROR(check_flag(flag, v, 1, int64_t{1} << 24, "a GEMM dimension, e.g. --m 2048 --k 768 --n 3072"));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 1000000, "untimed repetitions"));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed repetitions"));
  const int64_t n = a.form == "gram" ? a.m : a.n;  // C's columns
  // A, B and C in f32 (and bf16 copies): about 6 bytes per element of each.
  const double elems = static_cast<double>(a.m) * a.k + static_cast<double>(a.k) * n + static_cast<double>(a.m) * n;
  LMT_RETURN_IF_ERROR(check_fits_in_memory(6.0 * elems, "--m " + std::to_string(a.m) + " --k " + std::to_string(a.k) +
                                                            " --n " + std::to_string(a.n),
                                           "lower --m, --k or --n"));
  LMT_ASSIGN_OR_RETURN(kernels::Backend* backend, backend_from_flag(a.backend));
  kernels::Backend& be = *backend;
  Rng rng(1);
  // Forms: the GEMMs of a linear layer y = x·Wᵀ with x[M,K], W[N,K]; all cost 2·M·K·N flops.
  std::function<void()> fn;
  Tensor x, w, y, dy, dx, dw, c;
  if (a.form == "plain") {  // C[M,N] = A[M,K] · B[K,N]
    x = random_tensor(be, {a.m, a.k}, dtype, rng);
    w = random_tensor(be, {a.k, a.n}, dtype, rng);
    c = zeros(be, {a.m, a.n}, DType::kF32);
    fn = [&] { be.matmul(c, x, w, false, false, false); };
  } else if (a.form == "linear-fwd") {  // y[M,N] = x[M,K] · W[N,K]ᵀ
    x = random_tensor(be, {a.m, a.k}, dtype, rng);
    w = random_tensor(be, {a.n, a.k}, dtype, rng);
    y = zeros(be, {a.m, a.n}, DType::kF32);
    fn = [&] { be.linear_forward(y, x, w, TensorView()); };
  } else if (a.form == "linear-dx") {  // dx[M,K] = dy[M,N] · W[N,K]
    x = random_tensor(be, {a.m, a.k}, dtype, rng);
    w = random_tensor(be, {a.n, a.k}, dtype, rng);
    dy = random_tensor(be, {a.m, a.n}, dtype, rng);
    dx = zeros(be, {a.m, a.k}, DType::kF32);
    fn = [&] { be.linear_backward(dx, TensorView(), TensorView(), dy, x, w); };
  } else if (a.form == "linear-dw" || a.form == "linear-dw-write") {  // dW[N,K] (+)= dyᵀ[N,M] · x[M,K]
    x = random_tensor(be, {a.m, a.k}, dtype, rng);
    w = random_tensor(be, {a.n, a.k}, dtype, rng);
    dy = random_tensor(be, {a.m, a.n}, dtype, rng);
    dw = zeros(be, {a.n, a.k}, DType::kF32);
    const kernels::GradWrite write =
        a.form == "linear-dw" ? kernels::GradWrite::kAccumulate : kernels::GradWrite::kOverwrite;
    fn = [&, write] { be.linear_backward(TensorView(), dw, TensorView(), dy, x, w, write); };
  } else if (a.form == "gram") {  // C[M,M] = A[M,K] · A[M,K]ᵀ as a symmetric product (Muon's)
    x = random_tensor(be, {1, a.m, a.k}, dtype, rng);
    c = zeros(be, {1, a.m, a.m}, DType::kF32);
    fn = [&] { be.matmul_batched_symmetric(c, x, x, false, true); };
  } else {
    return InvalidArgument("--form '" + a.form + "' is unknown",
                           "use plain, linear-fwd, linear-dx, linear-dw, linear-dw-write or gram");
  }
  if (a.cold && !be.device().is_host())
    return InvalidArgument("--cold evicts host caches", "use it with --backend cpu");
  Timing t = time_it(be, a.warmup, a.iters, fn, a.cold ? std::function<void()>(evict_caches) : nullptr);
  const auto& peaks = metrics::measured_peaks();
  // The whole product's flops, also for gram (whose lower triangle is about half of them): its
  // GFLOP/s compare with linear-fwd's on the same M, K and N = M.
  const double flops = 2.0 * a.m * a.k * n;
  const double gflops = flops / t.median * 1e-9;
  LMT_ASSIGN_OR_RETURN(const double peak_flops, metrics::device_peak_flops(be.device_description(), dtype));
  const double peak = peak_flops * 1e-9;
  const double frac = peak > 0 ? gflops / peak : 0;
  // On oneDNN's bf16 matmul, or widened to f32 (kernels/cpu/cpu_backend.h, CpuBf16Gemms).
  const char* bf16_gemms = be.native_bf16_gemms() ? "native" : "widened";
  if (a.json) {
    nlohmann::json j = {{"bench", "matmul"}, {"m", a.m}, {"k", a.k}, {"n", n},
                        {"dtype", a.dtype}, {"form", a.form}, {"backend", a.backend}, {"iters", a.iters},
                        {"seconds", t.median}, {"seconds_best", t.best}, {"gflops", gflops},
                        {"gflops_best", flops / t.best * 1e-9}, {"peak_gflops", peak},
                        {"fraction_of_peak", frac}, {"cold", a.cold}, {"threads", metrics::cpu_info().threads},
                        {"gemm_isa", kernels::cpu_gemm_isa()}, {"bf16_gemms", bf16_gemms},
                        {"machine", metrics::machine_summary()}, {"device", be.device_description()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s; oneDNN GEMM ISA %s; bf16 GEMMs %s\n", metrics::machine_summary().c_str(),
                kernels::cpu_gemm_isa().c_str(), bf16_gemms);
    std::printf("matmul %s M=%lld K=%lld N=%lld (%s): median %.3f ms (best %.3f ms), %.1f GFLOP/s, "
                "%.1f%% of %s peak %.0f GFLOP/s%s\n",
                a.dtype.c_str(), static_cast<long long>(a.m), static_cast<long long>(a.k),
                static_cast<long long>(n), a.form.c_str(), t.median * 1e3, t.best * 1e3, gflops,
                frac * 100, dtype == DType::kBF16 ? peaks.bf16_unit.c_str() : "fp32", peak,
                a.form == "gram" ? " (counting the whole product's FLOPs, about twice what a lower triangle takes)" : "");
  }
  return Status::Ok();
}

struct AttentionArgs {
  int64_t batch = 4, heads = 12, kv_heads = 0, seq = 1024, head_dim = 64;
  std::string attention = "flash";
  std::string backend = "cpu";
  std::string compute = "fp32";
  int warmup = 2, iters = 5;
  bool json = false;
};

Status run_attention(const AttentionArgs& a) {
  const int64_t G = a.kv_heads > 0 ? a.kv_heads : a.heads;
  if (a.batch <= 0 || a.heads <= 0 || a.seq <= 0 || a.head_dim <= 0)
    return InvalidArgument("--micro-batch, --heads, --seq-len and --head-dim must be positive");
  LMT_RETURN_IF_ERROR(check_flag("--micro-batch", a.batch, 1, int64_t{1} << 20));
  LMT_RETURN_IF_ERROR(check_flag("--heads", a.heads, 1, int64_t{1} << 16));
  LMT_RETURN_IF_ERROR(check_flag("--kv-heads", a.kv_heads, 0, int64_t{1} << 16, "0: as many as --heads"));
  LMT_RETURN_IF_ERROR(check_flag("--seq-len", a.seq, 1, int64_t{1} << 24));
  LMT_RETURN_IF_ERROR(check_flag("--head-dim", a.head_dim, 1, int64_t{1} << 16));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 1000000, "untimed repetitions"));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed repetitions"));
  {
    // q, k, v, the output and their gradients in f32; the naive backend also holds T x T scores.
    const double tokens = static_cast<double>(a.batch) * static_cast<double>(a.seq);
    const double qkv = tokens * static_cast<double>(a.head_dim) * (4.0 * a.heads + 4.0 * (a.kv_heads > 0 ? a.kv_heads : a.heads));
    const double scores = a.attention == "naive" ? 2.0 * tokens * static_cast<double>(a.heads) * static_cast<double>(a.seq) : 0;
    LMT_RETURN_IF_ERROR(check_fits_in_memory(4.0 * (qkv + scores), "attention of --micro-batch " + std::to_string(a.batch) +
                                                                       " --seq-len " + std::to_string(a.seq),
                                             "lower --micro-batch or --seq-len"));
  }
  if (a.heads % G != 0)
    return InvalidArgument("--heads " + std::to_string(a.heads) + " is not a multiple of --kv-heads " +
                               std::to_string(G),
                           "choose kv heads that divide the query heads (e.g. 12 and 4)");
  LMT_ASSIGN_OR_RETURN(const DType compute, parse_compute_dtype(a.compute, "--compute"));
  kernels::AttentionBackend which;
  if (a.attention == "flash") which = kernels::AttentionBackend::kFlash;
  else if (a.attention == "naive") which = kernels::AttentionBackend::kNaive;
  else return InvalidArgument("--attention '" + a.attention + "' is unknown", "use flash or naive");

  if (a.backend == "flash" || a.backend == "naive")  // what --backend meant here before the registry
    return InvalidArgument("--backend '" + a.backend + "' is not a kernel backend (registered backends: " +
                               kernels::backend_names_text() + ")",
                           "flash or naive attention is chosen with --attention " + a.backend);
  LMT_ASSIGN_OR_RETURN(kernels::Backend* backend, backend_from_flag(a.backend));
  kernels::Backend& be = *backend;
  Rng rng(2);
  const int64_t B = a.batch, T = a.seq, NH = a.heads, HD = a.head_dim;
  Tensor q = random_tensor(be, {B, T, NH, HD}, DType::kF32, rng), k = random_tensor(be, {B, T, G, HD}, DType::kF32, rng),
         v = random_tensor(be, {B, T, G, HD}, DType::kF32, rng), dout = random_tensor(be, {B, T, NH, HD}, DType::kF32, rng);
  Tensor out = zeros(be, {B, T, NH, HD}, DType::kF32), lse = zeros(be, {B, NH, T}, DType::kF32);
  Tensor dq = zeros(be, {B, T, NH, HD}, DType::kF32), dk = zeros(be, {B, T, G, HD}, DType::kF32),
         dv = zeros(be, {B, T, G, HD}, DType::kF32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  auto fwd = [&] { be.attention_forward(which, out, lse, q, k, v, TensorView(), scale, compute); };
  auto bwd = [&] { be.attention_backward(which, dq, dk, dv, dout, q, k, v, out, lse, TensorView(), scale, compute); };
  Timing tf = time_it(be, a.warmup, a.iters, fwd);
  Timing tb = time_it(be, a.warmup, a.iters, bwd);
  // Causal attention: the two forward GEMMs cover half the T×T square; backward does 2.5× forward.
  const double flops_fwd = 2.0 * B * NH * static_cast<double>(T) * T * HD;
  const double flops = 3.5 * flops_fwd;
  const double secs = tf.median + tb.median;
  const double gflops = flops / secs * 1e-9;
  LMT_ASSIGN_OR_RETURN(const double peak_flops, metrics::device_peak_flops(be.device_description(), compute));
  const double peak = peak_flops * 1e-9;
  const double frac = peak > 0 ? gflops / peak : 0;
  const size_t ws = be.workspace_bytes();
  if (a.json) {
    nlohmann::json j = {{"bench", "attention"}, {"batch", B}, {"heads", NH}, {"kv_heads", G},
                        {"seq", T}, {"head_dim", HD}, {"attention", a.attention}, {"backend", a.backend},
                        {"compute", compute_dtype_name(compute)},
                        {"seconds", secs}, {"seconds_forward", tf.median},
                        {"seconds_backward", tb.median}, {"gflops", gflops},
                        {"gflops_forward", flops_fwd / tf.median * 1e-9},
                        {"gflops_backward", 2.5 * flops_fwd / tb.median * 1e-9},
                        {"peak_gflops", peak}, {"fraction_of_peak", frac},
                        {"workspace_bytes", ws}, {"threads", metrics::cpu_info().threads},
                        {"machine", metrics::machine_summary()}, {"device", be.device_description()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string compute_name(compute_dtype_name(compute));
    std::printf("machine: %s\n", metrics::machine_summary().c_str());
    std::printf("attention %s (%s) B=%lld NH=%lld G=%lld T=%lld HD=%lld: forward %.3f ms (%.1f GFLOP/s), "
                "backward %.3f ms (%.1f GFLOP/s), forward+backward %.3f ms, %.1f GFLOP/s, "
                "%.1f%% of %s peak %.0f GFLOP/s; workspace %.2f MiB\n",
                a.attention.c_str(), compute_name.c_str(), static_cast<long long>(B), static_cast<long long>(NH),
                static_cast<long long>(G), static_cast<long long>(T), static_cast<long long>(HD),
                tf.median * 1e3, flops_fwd / tf.median * 1e-9, tb.median * 1e3,
                2.5 * flops_fwd / tb.median * 1e-9, secs * 1e3, gflops, frac * 100, compute_name.c_str(), peak,
                static_cast<double>(ws) / (1 << 20));
  }
  return Status::Ok();
}

}  // namespace

void add_bench_command(CLI::App& app, Runner& runner) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: kernel and end-to-end throughput");
  bench->require_subcommand(1);

  static MatmulArgs mm;
  CLI::App* m = bench->add_subcommand("matmul", "GEMM throughput (oneDNN) vs this machine's peak");
  m->add_option("--m", mm.m, "rows of A and C")->capture_default_str();
  m->add_option("--k", mm.k, "inner dimension")->capture_default_str();
  m->add_option("--n", mm.n, "columns of B and C")->capture_default_str();
  m->add_option("--dtype", mm.dtype, "bf16 (f32 accumulate) or fp32")->capture_default_str();
  m->add_option("--form", mm.form,
                "plain: C=A·B; linear-fwd: y=x·Wᵀ; linear-dx: dx=dy·W; linear-dw: dW+=dyᵀ·x; linear-dw-write: "
                "dW=dyᵀ·x, the first write of a step's gradient (x[M,K], W[N,K]); gram: C[M,M]=A·Aᵀ as a symmetric product "
                "(Muon's; --n ignored; GFLOP/s count the whole product's 2·M·K·M)")->capture_default_str();
  m->add_option("--warmup", mm.warmup, "untimed repetitions")->capture_default_str();
  m->add_option("--iters", mm.iters, "timed repetitions (the median is reported)")->capture_default_str();
  m->add_flag("--cold", mm.cold, "evict the caches before each timed repetition (operands from memory, as in a step)");
  add_backend_flag(m, mm.backend);
  m->add_flag("--json", mm.json, "print one JSON object");
  m->callback([&runner] { runner.set(run_matmul(mm)); });

  static AttentionArgs at;
  CLI::App* t = bench->add_subcommand("attention", "causal attention forward+backward throughput");
  t->add_option("--micro-batch", at.batch, "B")->capture_default_str();
  add_deprecated_option(t, "--batch", "--micro-batch", at.batch);
  t->add_option("--heads", at.heads, "query heads NH")->capture_default_str();
  t->add_option("--kv-heads", at.kv_heads, "key/value heads G (default: NH)");
  t->add_option("--seq-len", at.seq, "sequence length T")->capture_default_str();
  add_deprecated_option(t, "--seq", "--seq-len", at.seq);
  t->add_option("--head-dim", at.head_dim, "head dimension HD")->capture_default_str();
  t->add_option("--attention", at.attention, "flash or naive")->capture_default_str();
  t->add_option("--compute", at.compute,
                "fp32, or bf16: the backend may round q, k, v and the probabilities to bf16 for its matrix "
                "units (cuda: tensor cores for head dims up to 128; cpu: AVX512-BF16 where it has it)")
      ->capture_default_str();
  add_backend_flag(t, at.backend);
  t->add_option("--warmup", at.warmup, "untimed repetitions")->capture_default_str();
  t->add_option("--iters", at.iters, "timed repetitions (the median is reported)")->capture_default_str();
  t->add_flag("--json", at.json, "print one JSON object");
  t->callback([&runner] { runner.set(run_attention(at)); });

  add_model_bench(bench, runner);
  add_train_bench(bench, runner);
  add_optim_bench(bench, runner);
  add_decode_bench(bench, runner);
  add_collectives_bench(bench, runner);
  add_tokenizer_bench(bench, runner);
  add_peak_bench(bench, runner);
}

}  // namespace lmt::cli
