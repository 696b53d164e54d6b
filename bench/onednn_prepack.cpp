// Does handing oneDNN its weights pre-packed pay on this CPU? (issue #21: the step's GEMMs run at
// ~80% of the bf16 peak.) With a plain weight layout, oneDNN's bf16 matmul repacks the weight into
// pairs along K on every call; created with format "any", it takes a weight reordered once into its
// own blocked layout. For one GEMM shape this times, with the caches evicted before each repetition
// (operands from memory, as in a training step), in alternating order:
//   plain      the layout lmtrain passes today (cpu/matmul.cpp), oneDNN's first implementation,
//              or with JIT=1 in the environment its "gemm:jit" (what lmtrain's gradients use)
//   prepacked  the weight reordered beforehand (not timed): the best case, packing for free
//   reorder    one reorder of the weight into that layout (what packing per call would add)
// and prints the medians. Forms (x[M,K] and W[N,K] bf16, f32 output):
//   fwd  y[M,N]  = x · Wᵀ               (linear forward; the LM head's logits)
//   dx   dx[M,N] = dy[M,K] · W[K,N]       (linear input gradient; K = output features)
//   dw   dW[M,N] += dy[K,M]ᵀ · x[K,N]      (linear weight gradient; K = rows of the batch)
//
//   build/bin/onednn_prepack_bench M K N [fwd|dx|dw] [repetitions]
//   e.g. build/bin/onednn_prepack_bench 1024 768 3072 fwd 11      (gpt2-124m's MLP up-projection)
// Not a test: a measurement for docs/PERFORMANCE.md ("oneDNN weights pre-packed").
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using dnnl::memory;
using dt = memory::data_type;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Writes 96 MiB, more than the last-level cache, so the next operation reads its operands from memory.
void evict_caches() {
  static std::vector<char> junk(96 << 20);
  for (size_t i = 0; i < junk.size(); i += 64) junk[i] = static_cast<char>(junk[i] + 1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s M K N [fwd|dx|dw] [repetitions]\n", argv[0]);
    return 2;
  }
  const int64_t M = std::atol(argv[1]), K = std::atol(argv[2]), N = std::atol(argv[3]);
  const std::string form = argc > 4 ? argv[4] : "fwd";
  const int reps = argc > 5 ? std::atoi(argv[5]) : 7;
  if (M <= 0 || K <= 0 || N <= 0 || reps <= 0 || (form != "fwd" && form != "dx" && form != "dw")) {
    std::fprintf(stderr, "M, K, N and repetitions must be positive, the form fwd, dx or dw\n");
    return 2;
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  // A: x (fwd), dy (dx), or dyᵀ read from dy[K, M] (dw). B: Wᵀ read from W[N, K] (fwd), W[K, N]
  // (dx), x[K, N] (dw).
  const memory::desc a_md({M, K}, dt::bf16, form == "dw" ? memory::dims{1, M} : memory::dims{K, 1});
  const memory::desc b_plain({K, N}, dt::bf16, form == "fwd" ? memory::dims{1, K} : memory::dims{N, 1});
  const memory::desc b_any({K, N}, dt::bf16, memory::format_tag::any);
  const memory::desc c_md({M, N}, dt::f32, memory::dims{N, 1});
  dnnl::primitive_attr attr;
  if (form == "dw") {  // dW accumulates
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc op_plain(a_md, b_plain, c_md), op_any(a_md, b_any, c_md);
  dnnl::matmul::primitive_desc pd_plain(op_plain, attr, eng);
  if (std::getenv("JIT") != nullptr) {
    while (std::string(pd_plain.impl_info_str()).rfind("gemm:jit", 0) != 0 && pd_plain.next_impl()) {
    }
  }
  const dnnl::matmul::primitive_desc pd_any(op_any, attr, eng);
  std::printf("plain: %s, prepacked: %s\n", pd_plain.impl_info_str(), pd_any.impl_info_str());

  std::vector<uint16_t> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N));
  std::vector<float> c(static_cast<size_t>(M * N));
  uint32_t r = 12345;
  auto next = [&r] { return r = r * 1664525u + 1013904223u; };
  for (uint16_t& x : a) x = static_cast<uint16_t>(0x3f80 + (next() >> 25));  // bf16 in [1, 2)
  for (uint16_t& x : b) x = static_cast<uint16_t>(0x3c00 + (next() >> 25));  // bf16 in [2^-7, 2^-6)
  memory am(a_md, eng, a.data()), bm(b_plain, eng, b.data()), cm(c_md, eng, c.data());
  memory packed(pd_any.weights_desc(), eng);
  dnnl::reorder pack(bm, packed);
  const dnnl::matmul plain(pd_plain), prepacked(pd_any);
  pack.execute(s, bm, packed);  // also faults the packed buffer's pages in
  s.wait();
  auto timed = [&](auto&& run) {
    evict_caches();
    const double t0 = now();
    run();
    s.wait();
    return now() - t0;
  };
  std::vector<double> t_plain, t_prepacked, t_reorder;
  for (int i = 0; i < reps + 2; ++i) {  // two untimed rounds
    const double tp = timed([&] { plain.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}}); });
    const double tq =
        timed([&] { prepacked.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, packed}, {DNNL_ARG_DST, cm}}); });
    const double tr = timed([&] { pack.execute(s, bm, packed); });
    if (i < 2) continue;
    t_plain.push_back(tp);
    t_prepacked.push_back(tq);
    t_reorder.push_back(tr);
  }
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(N);
  const double p = median(t_plain), q = median(t_prepacked), o = median(t_reorder);
  std::printf("M %lld K %lld N %lld %s, medians of %d: plain %.3f ms (%.0f GFLOP/s), prepacked %.3f ms (%.0f GFLOP/s), "
              "reorder %.3f ms; prepacked + reorder / plain = %.3f\n",
              static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N), form.c_str(), reps,
              p * 1e3, flops / p / 1e9, q * 1e3, flops / q / 1e9, o * 1e3, (q + o) / p);
  return 0;
}
