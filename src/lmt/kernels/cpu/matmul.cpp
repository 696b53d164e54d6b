// cpu: GEMM, linear forward/backward through oneDNN.
//
// Transposes are expressed as strides, so no operand is ever copied. Primitives are created once
// per (M, K, N, dtype, transposes, accumulate, bias) and cached with their memory objects; a call
// only swaps data handles. The grouped GEMM of the MoE experts sees a different row count per expert
// and step, so its primitives take the row count as a runtime dimension (one primitive per weight
// shape, not one per row count: creating a primitive costs ~100 us, and a cache keyed by every row
// count seen grows without bound over a run). Weight gradients (doutᵀ·inp) run in blocks of output
// rows with AVX-512, reading dout at its leading dimension (faster there; whole on AVX2, see
// kWeightGradRows, or transposed where dW is tall and thin, weight_grad_transposed()). bf16 inputs
// accumulate in f32 and oneDNN dispatches them to AMX (avx512_core_amx_bf16) or AVX512-BF16 where
// the CPU has them (check with ONEDNN_VERBOSE=1).
// Accumulation (C += A·B) is oneDNN's sum post-op, which reads C in the same pass. Each primitive
// takes oneDNN's first implementation, except the linear layers' gradients on AVX512-BF16 without
// AMX, which take "gemm:jit" (prefers_gemm_jit(): 3.6% on a gpt2-124m step on Zen 5).
// CPUs without AVX-512 (AVX2 only): oneDNN has no bf16 matmul there, so bf16 operands are widened
// to f32 (exact) into reused scratch buffers and multiplied in f32, with a one-time warning. The
// results equal a bf16 GEMM with f32 accumulation up to summation order; only the speed differs.
// The same widening runs where cpu_bf16_gemms() chooses it: CPUs whose bf16 unit is slower than
// their fp32 FMAs (an Intel Xeon without AMX: vdpbf16ps at half the fp32 FMA rate).
// There a batched product also runs one matrix at a time: oneDNN's sgemm parallelises a batch
// differently from a single product, which would make a matrix's result depend on its batch
// (cpu_gemm_rows_independent()), and f32 symmetric products run as single-threaded sgemms on row
// blocks shared out over the threads (symmetric_by_thread()).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "lmt/base/bf16.h"
#include "lmt/base/log.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/cpu/simd.h"
#include "lmt/kernels/cpu/vector_loop.h"
#include "lmt/tensor/tensor.h"  // aligned_alloc_bytes, aligned_free

namespace lmt::kernels {

namespace {

using dt = dnnl::memory::data_type;

dt to_dnnl(DType t) {
  switch (t) {
    case DType::kF32: return dt::f32;
    case DType::kBF16: return dt::bf16;
    default: LMT_CHECK(false) << "oneDNN matmul: unsupported dtype " << dtype_name(t);
  }
  return dt::undef;
}

// One cached GEMM: C[M,N] (+)= op(A)·op(B) (+ bias[N]); with batch > 1, that many independent
// products of contiguous [M,K]/[K,N]/[M,N] matrices in one primitive (no bias).
// runtime_m / runtime_k: M (resp. K) is given per call, the primitive serves every value. Only where
// no stride depends on it: runtime_m needs A untransposed, runtime_k needs Aᵀ and B untransposed
// (the row counts of a grouped linear's forward, input gradient and weight gradient).
struct GemmKey {
  int64_t M, K, N;
  DType in;
  bool trans_a, trans_b, accumulate, bias;
  int64_t batch = 1;
  bool runtime_m = false, runtime_k = false;
  // Unbatched products with B untransposed (the linear layers' input and weight gradients): on
  // CPUs whose bf16 GEMMs have no AMX, oneDNN's "gemm:jit" rather than its first choice (see
  // prefers_gemm_jit()).
  bool prefer_gemm_jit = false;
  // Leading dimensions (elements between stored rows) of A, B and C, and with batch > 1 the
  // elements between consecutive matrices; 0: dense (the stored row length, matrices back to back).
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  auto tie() const {
    return std::tie(M, K, N, in, trans_a, trans_b, accumulate, bias, batch, runtime_m, runtime_k, prefer_gemm_jit, lda,
                    ldb, ldc, stride_a, stride_b, stride_c);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
  // The key a cached primitive is stored under: runtime dimensions erased.
  GemmKey cached() const {
    GemmKey c = *this;
    if (runtime_m) c.M = DNNL_RUNTIME_DIM_VAL;
    if (runtime_k) c.K = DNNL_RUNTIME_DIM_VAL;
    return c;
  }
};

// Whether an unbatched GEMM with B untransposed takes oneDNN's "gemm:jit" over `first`, the
// implementation oneDNN lists first: only over brgemm on AVX512-BF16 without AMX. There (oneDNN 2.6,
// Zen 5, bf16, both cores; `lmtrain bench matmul --form linear-dw|linear-dx`, docs/PERFORMANCE.md)
// gemm:jit ran gpt2-124m's MLP projection weight gradient dW[768, 3072] += doutᵀ·x in 5.3 ms against
// brgemm's 6.1 and the input gradients 1–3% faster; the forward passes (B transposed), where a
// one-off timing found brgemm as fast or faster, keep oneDNN's choice. The choice depends on the
// shape's flags only, so results stay reproducible; batched products keep oneDNN's choice (a
// matrix's result must not depend on its batch).
bool prefers_gemm_jit(const char* first) { return std::string(first).rfind("brg:avx512_core_bf16", 0) == 0; }

struct GemmDescs {
  dnnl::memory::desc a, b, c;
};

// Row-major [rows, cols] with explicit strides; a transposed operand is stored [cols, rows]. With a
// runtime dimension erased (cached()), these describe the primitive; with real values, one call.
GemmDescs gemm_descs(const GemmKey& k) {
  using md = dnnl::memory::desc;
  using dims = dnnl::memory::dims;
  const dt in = to_dnnl(k.in);
  const int64_t lda = k.lda > 0 ? k.lda : (k.trans_a ? k.M : k.K);
  const int64_t ldb = k.ldb > 0 ? k.ldb : (k.trans_b ? k.K : k.N);
  const int64_t ldc = k.ldc > 0 ? k.ldc : k.N;
  const dims sa = k.trans_a ? dims{1, lda} : dims{lda, 1}, sb = k.trans_b ? dims{1, ldb} : dims{ldb, 1};
  if (k.batch > 1 || k.stride_c > 0) {  // a stack (even of one: the same primitive for every batch size)
    const int64_t ba = k.stride_a > 0 ? k.stride_a : k.M * k.K, bb = k.stride_b > 0 ? k.stride_b : k.K * k.N;
    const int64_t bc = k.stride_c > 0 ? k.stride_c : k.M * k.N;
    return {md({k.batch, k.M, k.K}, in, dims{ba, sa[0], sa[1]}), md({k.batch, k.K, k.N}, in, dims{bb, sb[0], sb[1]}),
            md({k.batch, k.M, k.N}, dt::f32, dims{bc, ldc, 1})};
  }
  return {md({k.M, k.K}, in, sa), md({k.K, k.N}, in, sb), md({k.M, k.N}, dt::f32, dims{ldc, 1})};
}

struct GemmPrimitive {
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias;
};

}  // namespace

// Floats from aligned_alloc_bytes (tensor/tensor.h: 64-byte boundaries, huge pages for large
// blocks), as tensors get: the widened operands and dWᵀ chunks, so that oneDNN's AVX-512 loads never
// split a cache line. std::vector's own allocator gives 16 bytes: on an Intel Xeon (family 6 model
// 207) a bf16 gpt2-124m step with widened GEMMs ran 1.09x faster aligned (llama-124m 1.03x;
// docs/PERFORMANCE.md).
template <typename T>
struct HostAlignedAllocator {
  using value_type = T;
  HostAlignedAllocator() = default;
  template <typename U>
  HostAlignedAllocator(const HostAlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(aligned_alloc_bytes(n * sizeof(T))); }
  void deallocate(T* p, size_t) { aligned_free(p); }
  template <typename U>
  bool operator==(const HostAlignedAllocator<U>&) const { return true; }
};
using WideBuffer = std::vector<float, HostAlignedAllocator<float>>;

struct CpuBackend::Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<GemmKey, GemmPrimitive> cache;
  int bf16_native = -1;                   // -1 unknown; 1 oneDNN's bf16 matmul; 0 widen bf16 operands to f32
  std::optional<CpuBf16Gemms> bf16_mode;  // set_bf16_gemms(); else the process's cpu_bf16_gemms()
  WideBuffer wide_a, wide_b;              // the widened operands, grown as needed
  WideBuffer dw_transposed;               // a chunk of dWᵀ (weight_grad_transposed()), grown as needed

  // The B operands pinned by live WidenPins (innermost last); `rows` < 0 until first widened.
  struct Pinned {
    const void* src;
    int64_t rows = -1, cols = 0, ld = 0;
    WideBuffer* wide;
  };
  std::vector<Pinned> pins;
  std::vector<std::unique_ptr<WideBuffer>> pin_buffers;  // one per nesting depth, reused

  // Whether bf16 GEMMs run on oneDNN's bf16 matmul: not where kWidened is chosen, else where oneDNN
  // has one, found out (once) by creating k's primitive.
  bool native_bf16(const GemmKey& k) {
    if (bf16_native == -1 && bf16_mode.value_or(cpu_bf16_gemms()) == CpuBf16Gemms::kWidened) bf16_native = 0;
    if (bf16_native == -1) {
      try {
        get(k);
        bf16_native = 1;
      } catch (const dnnl::error&) {
        bf16_native = 0;
        LMT_LOG(WARNING) << "oneDNN has no bf16 matmul on this CPU (ISA " << cpu_gemm_isa()
                         << "): bf16 GEMM operands are widened to f32 (same results, slower)";
      }
    }
    return bf16_native == 1;
  }

  // b widened: the pinned copy if a pin holds this operand (widened at its first use), else fresh.
  const float* widen_b(const void* b, int64_t rows, int64_t cols, int64_t ld) {
    for (Pinned& p : pins) {
      if (p.src != b) continue;
      if (p.rows == rows && p.cols == cols && p.ld == ld) return p.wide->data();
      if (p.rows < 0) {
        p.rows = rows, p.cols = cols, p.ld = ld;
        return widen_rows(b, rows, cols, ld, p.wide);
      }
    }
    return widen_rows(b, rows, cols, ld, &wide_b);
  }

  static const float* widen(const void* src, int64_t n, WideBuffer* dst) {
    if (static_cast<int64_t>(dst->size()) < n) dst->resize(static_cast<size_t>(n));
    const uint16_t* in = static_cast<const uint16_t*>(src);
    float* out = dst->data();
    constexpr int64_t kBlock = 1 << 14;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += kBlock) cpu_bf16_to_f32(out + i, in + i, std::min(kBlock, n - i));
    return out;
  }

  // The `rows` stored rows of `cols` elements, `ld` apart, widened into a dense [rows, cols]: only
  // what the product reads (a weight gradient's block of dout columns, read at dout's leading
  // dimension, is a sliver of the rows it spans).
  static const float* widen_rows(const void* src, int64_t rows, int64_t cols, int64_t ld, WideBuffer* dst) {
    if (ld <= 0 || ld == cols) return widen(src, rows * cols, dst);
    if (static_cast<int64_t>(dst->size()) < rows * cols) dst->resize(static_cast<size_t>(rows * cols));
    const uint16_t* in = static_cast<const uint16_t*>(src);
    float* out = dst->data();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) cpu_bf16_to_f32(out + r * cols, in + r * ld, cols);
    return out;
  }

  // The cached primitive for k (runtime dimensions erased); with no runtime dimension, its memory
  // objects too.
  GemmPrimitive& get(const GemmKey& k) {
    const GemmKey key = k.cached();
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    LMT_CHECK(!(k.runtime_m || k.runtime_k) || (k.batch == 1 && !k.bias)) << "oneDNN matmul: runtime dims unbatched, no bias";
    LMT_CHECK((k.lda == 0 && k.ldb == 0 && k.ldc == 0) || (!k.runtime_m && !k.runtime_k))
        << "oneDNN matmul: leading dimensions need fixed dims";
    LMT_CHECK(!k.runtime_m || !k.trans_a) << "oneDNN matmul: a runtime M needs A untransposed";
    LMT_CHECK(!k.runtime_k || (k.trans_a && !k.trans_b)) << "oneDNN matmul: a runtime K needs Aᵀ and B";
    const GemmDescs d = gemm_descs(key);
    dnnl::primitive_attr attr;
    if (k.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    GemmPrimitive g;
    dnnl::memory::desc bias_md({1, k.N}, dt::f32, dnnl::memory::dims{k.N, 1});
    // The operation descriptor outlives the primitive descriptors: their implementation iterator
    // reads it (a temporary here ends the iteration after oneDNN's first choice).
    const dnnl::matmul::desc op = k.bias ? dnnl::matmul::desc(d.a, d.b, bias_md, d.c) : dnnl::matmul::desc(d.a, d.b, d.c);
    auto make = [&] { return dnnl::matmul::primitive_desc(op, attr, engine); };
    dnnl::matmul::primitive_desc pd = make();
    if (k.prefer_gemm_jit && prefers_gemm_jit(pd.impl_info_str())) {
      bool found = false;
      while (!found && pd.next_impl()) found = std::string(pd.impl_info_str()).rfind("gemm:jit", 0) == 0;
      if (!found) pd = make();
    }
    if (k.bias) g.bias = dnnl::memory(bias_md, engine, DNNL_MEMORY_NONE);
    g.prim = dnnl::matmul(pd);
    if (!k.runtime_m && !k.runtime_k) {  // memory with runtime dimensions is made per call
      g.a = dnnl::memory(d.a, engine, DNNL_MEMORY_NONE);
      g.b = dnnl::memory(d.b, engine, DNNL_MEMORY_NONE);
      g.c = dnnl::memory(d.c, engine, DNNL_MEMORY_NONE);
    }
    return cache.emplace(key, std::move(g)).first->second;
  }

  void run(const GemmKey& k, const void* a, const void* b, void* c, const void* bias) {
    if (k.M == 0 || k.N == 0 || k.batch == 0) return;
    if (k.K == 0) {  // oneDNN rejects empty reductions; the product is zero
      if (!k.accumulate) {
        LMT_CHECK(k.ldc == 0 && k.stride_c == 0) << "oneDNN matmul: an empty reduction into a strided C";
        std::fill_n(static_cast<float*>(c), k.batch * k.M * k.N, 0.0f);
      }
      return;
    }
    const bool widened = k.in == DType::kBF16 && !native_bf16(k);
    // One matrix at a time: where rows depend on their row-mates (a batch would change a matrix's
    // result), and where bf16 is widened (each matrix's operands widened densely, as below).
    if ((k.batch > 1 || k.stride_c > 0) && (widened || !cpu_gemm_rows_independent())) {
      GemmKey one = k;
      one.batch = 1;
      one.stride_a = one.stride_b = one.stride_c = 0;
      const size_t es = dtype_size(k.in);
      const int64_t sa = k.stride_a > 0 ? k.stride_a : k.M * k.K, sb = k.stride_b > 0 ? k.stride_b : k.K * k.N;
      const int64_t sc = k.stride_c > 0 ? k.stride_c : k.M * k.N;
      for (int64_t i = 0; i < k.batch; ++i)
        run(one, static_cast<const char*>(a) + i * sa * es, static_cast<const char*>(b) + i * sb * es,
            static_cast<float*>(c) + i * sc, bias);
      return;
    }
    if (widened) {  // each operand widened densely: only what the product reads
      GemmKey wide = k;
      wide.in = DType::kF32;
      wide.lda = wide.ldb = 0;
      const int64_t a_rows = k.trans_a ? k.K : k.M, a_cols = k.trans_a ? k.M : k.K;
      const int64_t b_rows = k.trans_b ? k.N : k.K, b_cols = k.trans_b ? k.K : k.N;
      run(wide, widen_rows(a, a_rows, a_cols, k.lda, &wide_a), widen_b(b, b_rows, b_cols, k.ldb), c, bias);
      return;
    }
    GemmPrimitive& g = get(k);
    std::unordered_map<int, dnnl::memory> args;
    if (k.runtime_m || k.runtime_k) {
      const GemmDescs d = gemm_descs(k);
      args = {{DNNL_ARG_SRC, dnnl::memory(d.a, engine, const_cast<void*>(a))},
              {DNNL_ARG_WEIGHTS, dnnl::memory(d.b, engine, const_cast<void*>(b))},
              {DNNL_ARG_DST, dnnl::memory(d.c, engine, c)}};
    } else {
      g.a.set_data_handle(const_cast<void*>(a));
      g.b.set_data_handle(const_cast<void*>(b));
      g.c.set_data_handle(c);
      args = {{DNNL_ARG_SRC, g.a}, {DNNL_ARG_WEIGHTS, g.b}, {DNNL_ARG_DST, g.c}};
    }
    if (k.bias) {
      g.bias.set_data_handle(const_cast<void*>(bias));
      args.emplace(DNNL_ARG_BIAS, g.bias);
    }
    g.prim.execute(stream, args);
    stream.wait();
  }
};

CpuBackend::CpuBackend() : dnnl_(std::make_unique<Dnnl>()) {}

CpuBackend::WidenPin::WidenPin(CpuBackend& backend, const void* b) : dnnl_(backend.dnnl_.get()) {
  const size_t depth = dnnl_->pins.size();
  if (dnnl_->pin_buffers.size() <= depth) dnnl_->pin_buffers.push_back(std::make_unique<WideBuffer>());
  dnnl_->pins.push_back({b, -1, 0, 0, dnnl_->pin_buffers[depth].get()});
}

CpuBackend::WidenPin::~WidenPin() { dnnl_->pins.pop_back(); }

std::string cpu_gemm_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}
CpuBackend::~CpuBackend() = default;

namespace {
// Whether oneDNN's GEMMs run on one of its AVX-512 ISAs (oneDNN 2.6, Debian 12's; a newer oneDNN's
// further ones, avx512_core_fp16 or AVX10, would land in `default` until added here); else on AVX2's
// sgemm (bf16 operands widened to f32).
bool avx512_gemms() {
  static const bool avx512 = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case dnnl::cpu_isa::avx512_core:
      case dnnl::cpu_isa::avx512_core_vnni:
      case dnnl::cpu_isa::avx512_core_bf16:
      case dnnl::cpu_isa::avx512_core_amx: return true;
      default: return false;
    }
  }();
  return avx512;
}
}  // namespace

// True on AVX-512 (its kernels, tested bit for bit); AVX2's sgemm does not (cpu_backend.h).
bool cpu_gemm_rows_independent() { return avx512_gemms(); }

size_t CpuBackend::cached_gemm_primitives() const { return dnnl_->cache.size(); }

namespace {
std::atomic<CpuBf16Gemms (*)()> g_bf16_gemm_chooser{nullptr};
}  // namespace

void set_cpu_bf16_gemm_chooser(CpuBf16Gemms (*chooser)()) { g_bf16_gemm_chooser.store(chooser); }

CpuBf16Gemms cpu_bf16_gemms() {
  static const CpuBf16Gemms mode = [] {
    if (const char* v = std::getenv("LMT_CPU_BF16_GEMM"); v != nullptr && *v != '\0') {
      const std::string_view s(v);
      if (s == "native") return CpuBf16Gemms::kNative;
      if (s == "widened") return CpuBf16Gemms::kWidened;
      LMT_LOG(WARNING) << "LMT_CPU_BF16_GEMM='" << s << "' is ignored: it must be 'native' or 'widened' "
                       << "(hint: unset it to let lmtrain choose from the measured peaks)";
    }
    CpuBf16Gemms (*chooser)() = g_bf16_gemm_chooser.load();
    return chooser != nullptr ? chooser() : CpuBf16Gemms::kNative;
  }();
  return mode;
}

void CpuBackend::set_bf16_gemms(CpuBf16Gemms mode) {
  dnnl_->bf16_mode = mode;
  dnnl_->bf16_native = -1;  // decided again at the next bf16 GEMM
}

bool CpuBackend::native_bf16_gemms() const {
  GemmKey probe{16, 16, 16, DType::kBF16, false, false, false, false};
  return dnnl_->native_bf16(probe);
}

namespace {
// The weight gradient doutᵀ·inp (A transposed) runs faster in blocks of this many output rows with
// AVX-512: on Zen 5 (oneDNN 2.6, bf16, N = 1024) gpt2-124m's four dW shapes take 17.5 ms per layer
// in blocks of 512 against 20.4 ms whole (cold caches); the LM head's [50257, 256]ᵀ product gains
// the most. AVX2's sgemm is the other way round: the LM head's (--n 50257) ran 14% faster whole on
// Zen 3, 492-534 ms against 576-626 ms in blocks of 512 (3 interleaved rounds of `bench matmul
// --form linear-dw --cold --m 1024 --k 768 --dtype bf16`, 2026-11-27; 4096-row blocks sat between),
// c_fc's (--n 3072) the same either way (34-38 ms); and the whole product widens no more of dlogits
// than the LM head's input gradient already does.
constexpr int64_t kWeightGradRows = 512;
int64_t weight_grad_block_rows(int64_t out_rows) {
  return avx512_gemms() && out_rows >= 2 * kWeightGradRows ? kWeightGradRows : out_rows;
}

// AVX2's sgemm runs dW[OC,C] = doutᵀ·inp at half speed where dW is tall and thin: on Zen 3 the tiny
// preset's LM head (OC 4096, C 256, 2048 rows: `lmtrain bench matmul --m 2048 --k 256 --n 4096
// --form linear-dw-write --dtype bf16`) at 37% of the peak, while its transpose dWᵀ = inpᵀ·dout, a
// wide product, runs at twice that. There (C ≤ 256, OC ≥ 4·C) dWᵀ is computed in chunks of
// kTransposedDwRows rows of dW and each chunk transposed into dW. Wider dW (gpt2-124m's, C = 768)
// keep the direct product: a throwaway timing found no gain there, so no figure is claimed.
constexpr int64_t kTransposedDwRows = 4096;
bool weight_grad_transposed(int64_t out_rows, int64_t cols) {
  return !avx512_gemms() && cols <= 256 && out_rows >= 4 * cols;
}

// dw[r, c] (+)= t[c, r] for r < rows, c < cols: t [cols, rows] dense, dw [rows, cols] dense; in
// 32-row stripes of dw (a stripe's rows stay in L1 while t is read a row segment at a time).
void transpose_into(float* dw, const float* t, int64_t rows, int64_t cols, bool accumulate) {
  constexpr int64_t kStripe = 32;
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kStripe) {
    const int64_t r1 = std::min(rows, r0 + kStripe);
    for (int64_t c = 0; c < cols; ++c) {
      const float* src = t + c * rows;
      if (accumulate)
        for (int64_t r = r0; r < r1; ++r) dw[r * cols + c] += src[r];
      else
        for (int64_t r = r0; r < r1; ++r) dw[r * cols + c] = src[r];
    }
  }
}

void require_gemm_dtype(const char* op, const TensorView& t) {
  LMT_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16)
      << "kernel '" << op << "': the cpu backend takes f32 or bf16 GEMM inputs, got " << t.to_string();
}

// dbias[OC] += Σ_n dout[n, :], dout f32 or bf16, parallel over column blocks (race-free).
template <typename T>
void column_sums(float* dbias, const T* dout, int64_t N, int64_t OC) {
  constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static)
  for (int64_t o0 = 0; o0 < OC; o0 += kBlock) {
    const int64_t o1 = std::min(OC, o0 + kBlock);
    float acc[kBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const T* row = dout + n * OC;
#pragma omp simd
      for (int64_t o = o0; o < o1; ++o) acc[o - o0] += static_cast<float>(row[o]);
    }
    for (int64_t o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
  }
}
}  // namespace

void CpuBackend::matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                             bool trans_a, bool trans_b, bool accumulate) {
  require_gemm_dtype("matmul", a);
  const int64_t M = c.dim(0), N = c.dim(1), K = trans_a ? a.dim(0) : a.dim(1);
  dnnl_->run({M, K, N, a.dtype(), trans_a, trans_b, accumulate, false}, a.data(), b.data(), c.data(),
             nullptr);
}

void CpuBackend::matmul_batched_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                                     bool trans_a, bool trans_b, bool accumulate) {
  require_gemm_dtype("matmul_batched", a);
  const int64_t B = c.dim(0), M = c.dim(1), N = c.dim(2), K = trans_a ? a.dim(1) : a.dim(2);
  GemmKey k{M, K, N, a.dtype(), trans_a, trans_b, accumulate, false};
  k.batch = B;
  dnnl_->run(k, a.data(), b.data(), c.data(), nullptr);
}

namespace {
// The row blocks of a symmetric product, each a multiple of 32 rows (the mirror's tile), the last
// one taking the remainder (a sliver of a block would run on other oneDNN kernels than the same rows
// alone, and break the batch invariance). quarters(): about a quarter of M each (5/8 of the FLOPs),
// one threaded GEMM per block; or blocks of `block_rows` rows, one single-threaded GEMM each, shared
// out over the threads (symmetric_sgemm_by_thread() below).
struct SymmetricBlocks {
  int64_t M, size, count;
  static SymmetricBlocks quarters(int64_t m) {
    return SymmetricBlocks(m, std::max<int64_t>(Backend::kSymmetricBlockMin, (m / 4 + 31) / 32 * 32));
  }
  SymmetricBlocks(int64_t m, int64_t block_rows) : M(m), size(block_rows), count(m / block_rows) {}
  int64_t begin(int64_t i) const { return i * size; }
  int64_t end(int64_t i) const { return i + 1 == count ? M : (i + 1) * size; }
  int64_t end_of_row(int64_t r) const { return end(std::min(r / size, count - 1)); }
};

// m[r, c] ← m[c, r] for r in [r0, r1), c in [c0, c1), all above the diagonal (c0 ≥ r1: it reads only
// below it): 16 × 16 blocks transposed in registers, 8 × 8 on AVX2, edges element by element
// (element by element throughout it took 7% of Muon's step on Zen 5, `perf record` of `lmtrain
// bench optim`; on Zen 3 the 8 × 8 blocks took the mirror from 3.6% to 1.1% of its samples).
void mirror_by_element(float* m, int64_t M, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  for (int64_t col = c0; col < c1; ++col)  // read row `col` of the lower part contiguously
    for (int64_t r = r0; r < r1; ++r) m[r * M + col] = m[col * M + r];
}

void mirror_rect(float* m, int64_t M, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
#ifdef __AVX512F__
  for (int64_t rr = r0; rr < r1; rr += 16)
    for (int64_t cc = c0; cc < c1; cc += 16) {
      const int nr = static_cast<int>(std::min<int64_t>(16, r1 - rr));
      const int ncol = static_cast<int>(std::min<int64_t>(16, c1 - cc));
      __m512i v[16];
      for (int i = 0; i < 16; ++i)  // v[i] = row cc + i of the lower part, columns rr..rr+nr
        v[i] = i < ncol ? _mm512_maskz_loadu_epi32(simd::tail_mask(nr), m + (cc + i) * M + rr) : _mm512_setzero_si512();
      simd::transpose16(v);
      for (int j = 0; j < nr; ++j) _mm512_mask_storeu_epi32(m + (rr + j) * M + cc, simd::tail_mask(ncol), v[j]);
    }
#elif defined(LMT_SIMD_AVX2)
  for (int64_t rr = r0; rr < r1; rr += 8)
    for (int64_t cc = c0; cc < c1; cc += 8) {
      if (rr + 8 > r1 || cc + 8 > c1) {
        mirror_by_element(m, M, rr, std::min(r1, rr + 8), cc, std::min(c1, cc + 8));
        continue;
      }
      __m256 v[8];
      for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(m + (cc + i) * M + rr);
      simd::transpose8(v);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(m + (rr + j) * M + cc, v[j]);
    }
#else
  mirror_by_element(m, M, r0, r1, c0, c1);
#endif
}

// c[i]'s upper triangle beyond each row block's computed columns ← the lower one, in 32 × 32 tiles
// (both tiles stay in L1; a row-by-row copy reads one cache line per element).
void mirror_lower(float* c, int64_t nb, const SymmetricBlocks& blocks) {
  constexpr int64_t kTile = 32;
  const int64_t M = blocks.M, tiles = (M + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t t = 0; t < tiles; ++t) {  // tile row t: rows [t·32, t·32 + 32)
      float* m = c + i * M * M;
      const int64_t r0 = t * kTile, r1 = std::min(M, r0 + kTile);
      for (int64_t c0 = blocks.end_of_row(r0); c0 < M; c0 += kTile)  // the tile row's rows share a row block
        mirror_rect(m, M, r0, r1, c0, std::min(M, c0 + kTile));
    }
}

// Each row block's diagonal square above its diagonal ← below it. A GEMM's (r, c) and (c, r) add
// the same products, but only kernels that sum every element in one order make them equal: AVX2's
// sgemm does not (edge tiles), so there (!cpu_gemm_rows_independent()) the squares are mirrored too.
// In stripes of 8 rows (block sizes are multiples of 32): the stripe's own 8 × 8 triangle element
// by element, the rest of its row block's square as rectangles.
void mirror_diagonal_blocks(float* c, int64_t nb, const SymmetricBlocks& blocks) {
  constexpr int64_t kStripe = 8;
  const int64_t M = blocks.M, stripes = (M + kStripe - 1) / kStripe;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t t = 0; t < stripes; ++t) {
      float* m = c + i * M * M;
      const int64_t r0 = t * kStripe, r1 = std::min(M, r0 + kStripe);
      for (int64_t r = r0; r < r1; ++r) mirror_by_element(m, M, r, r + 1, r + 1, r1);
      mirror_rect(m, M, r0, r1, r1, blocks.end_of_row(r0));
    }
}
}  // namespace

namespace {
// f32 symmetric products on AVX2 (oneDNN's sgemm): the lower triangle in row blocks of this many
// rows, each block one single-threaded sgemm, the blocks shared out over the threads largest first.
// oneDNN splitting each of four 192-row blocks over both cores ran them at 64-74% of the peak
// (ONEDNN_VERBOSE, Zen 3), and 64-row blocks leave 54% of a 768-row product's FLOPs, not 5/8:
// gpt2-124m's Muon step 4.68 -> 4.00 s (`lmtrain bench optim`; one 768 × 768 × 768 product,
// `bench matmul --form gram`, 2.9-3.1 ms against 5.3 for the whole; docs/PERFORMANCE.md).
constexpr int64_t kSymmetricThreadBlockRows = 64;

// Whether a symmetric product of side M runs as symmetric_sgemm_by_thread(): f32 operands, AVX2's
// sgemm, and at least two blocks per thread (a block of i + 1 units among ~count²/2 keeps the
// threads within a block of each other). Depends on M and the thread count only, never on the batch.
bool symmetric_by_thread(DType in, int64_t M) {
  return in == DType::kF32 && !avx512_gemms() && M / kSymmetricThreadBlockRows >= 2 * omp_get_max_threads();
}

// The lower triangle's row blocks of c[nb, M, M] = op(a) · op(b), one single-threaded dnnl_sgemm per
// (matrix, block) (oneDNN runs inside a parallel region on the calling thread), largest blocks
// first; a matrix's blocks are the same calls whatever the batch or the thread that runs them.
void symmetric_sgemm_by_thread(float* c, const float* a, const float* b, int64_t nb, int64_t K, bool trans_a,
                               bool trans_b, const SymmetricBlocks& blocks) {
  const int64_t M = blocks.M, items = nb * blocks.count;
  dnnl_status_t failed = dnnl_success;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < items; ++t) {
    const int64_t blk = blocks.count - 1 - t / nb, i = t % nb;
    const int64_t r0 = blocks.begin(blk), r1 = blocks.end(blk);
    const float* ai = a + i * M * K;
    // op(a)'s rows r0.. are a's rows (a [M,K]) or columns (a [K,M]); op(b)'s columns 0..r1 are b's
    // first rows (b [M,K]) or columns (b [K,M])
    const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', r1 - r0, r1, K, 1.0f,
                                       trans_a ? ai + r0 : ai + r0 * K, trans_a ? M : K, b + i * M * K,
                                       trans_b ? K : M, 0.0f, c + i * M * M + r0 * M, M);
    if (s != dnnl_success) {
#pragma omp critical(lmt_symmetric_sgemm)
      failed = s;
    }
  }
  LMT_CHECK(failed == dnnl_success) << "oneDNN sgemm of a symmetric product's row block failed (status "
                                    << static_cast<int>(failed) << ")";
}
}  // namespace

// The lower triangle in row blocks [r0, r1): c[r0:r1, 0:r1] = op(a)[r0:r1, :] · op(b)[:, 0:r1], one
// batched primitive per block reading a, b and c at their leading dimensions (or the blocks spread
// over the threads, symmetric_by_thread()); then the mirror.
void CpuBackend::matmul_batched_symmetric_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                                               bool trans_a, bool trans_b) {
  require_gemm_dtype("matmul_batched_symmetric", a);
  const int64_t nb = c.dim(0), M = c.dim(1), K = trans_a ? a.dim(1) : a.dim(2);
  if (M < 2 * kSymmetricBlockMin || K == 0) {  // small (or zero: an empty reduction): the whole product
    matmul_batched_impl(c, a, b, trans_a, trans_b, false);
    return;
  }
  float* pc = c.as<float>();
  const bool by_thread = symmetric_by_thread(a.dtype(), M);
  const SymmetricBlocks blocks =
      by_thread ? SymmetricBlocks(M, kSymmetricThreadBlockRows) : SymmetricBlocks::quarters(M);
  if (by_thread) {
    symmetric_sgemm_by_thread(pc, a.as<float>(), b.as<float>(), nb, K, trans_a, trans_b, blocks);
  } else {
    const size_t es = dtype_size(a.dtype());
    const char* pa = static_cast<const char*>(a.data());
    for (int64_t i = 0; i < blocks.count; ++i) {
      const int64_t r0 = blocks.begin(i), r1 = blocks.end(i);
      GemmKey k{r1 - r0, K, r1, a.dtype(), trans_a, trans_b, false, false};
      k.batch = nb;
      k.lda = trans_a ? M : K;  // op(a)'s rows r0.. are a's rows (a [M,K]) or columns (a [K,M])
      k.ldb = trans_b ? K : M;  // op(b)'s columns 0..r1 are b's first rows (b [M,K]) or columns (b [K,M])
      k.ldc = M;
      k.stride_a = k.stride_b = M * K;
      k.stride_c = M * M;
      dnnl_->run(k, pa + static_cast<size_t>(trans_a ? r0 : r0 * K) * es, b.data(), pc + r0 * M, nullptr);
    }
  }
  mirror_lower(pc, nb, blocks);
  if (!cpu_gemm_rows_independent()) mirror_diagonal_blocks(pc, nb, blocks);
}

void CpuBackend::linear_forward_impl(const TensorView& out, const TensorView& inp,
                                     const TensorView& weight, const TensorView& bias) {
  require_gemm_dtype("linear_forward", inp);
  const int64_t N = inp.dim(0), C = inp.dim(1), OC = weight.dim(0);
  if (inp.dtype() != weight.dtype()) {  // f32 activations, bf16 weights (validated): decode GEMVs
    linear_forward_bf16_weights(out.as<float>(), inp.as<float>(), static_cast<const uint16_t*>(weight.data()),
                                bias.present() ? bias.as<float>() : nullptr, N, C, OC);
    return;
  }
  // out = inp · weightᵀ: weight[OC,C] read as a transposed [C,OC] operand.
  dnnl_->run({N, C, OC, inp.dtype(), false, true, false, bias.present()}, inp.data(), weight.data(),
             out.data(), bias.data());
}

// dweight[OC,C] (+)= doutᵀ[OC,N] · inp[N,C], in blocks of weight_grad_block_rows(); block o0 reads dout's
// columns [o0, o1) as Aᵀ at leading dimension OC. Written over dweight (accumulate false), the GEMM
// does not read it (with the fill it spares, ~2% of a gpt2-124m step on Zen 5; docs/PERFORMANCE.md).
// Tall and thin dW on AVX2 (weight_grad_transposed()): dWᵀ[C, w] = inpᵀ[C,N] · dout[N, o0:o1] per
// chunk of w rows of dW, reading dout's columns at its leading dimension, then transposed into dW.
void CpuBackend::weight_grad(const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                             bool accumulate) {
  const int64_t N = inp.dim(0), C = inp.dim(1), OC = dweight.dim(0);
  const char* d = static_cast<const char*>(dout.data());
  if (weight_grad_transposed(OC, C)) {
    WideBuffer& t = dnnl_->dw_transposed;
    const int64_t chunk = std::min(OC, kTransposedDwRows);
    if (static_cast<int64_t>(t.size()) < C * chunk) t.resize(static_cast<size_t>(C * chunk));
    for (int64_t o0 = 0; o0 < OC; o0 += chunk) {
      const int64_t w = std::min(chunk, OC - o0);
      GemmKey k{C, N, w, dout.dtype(), true, false, false, false};
      k.ldb = OC;
      dnnl_->run(k, inp.data(), d + o0 * dtype_size(dout.dtype()), t.data(), nullptr);
      transpose_into(dweight.as<float>() + o0 * C, t.data(), w, C, accumulate);
    }
    return;
  }
  const int64_t block = weight_grad_block_rows(OC);
  const WidenPin pin(*this, inp.data());  // every block reads all of inp
  for (int64_t o0 = 0; o0 < OC; o0 += block) {
    const int64_t o1 = std::min(OC, o0 + block);
    GemmKey k{o1 - o0, N, C, dout.dtype(), true, false, accumulate, false};
    k.lda = OC;
    k.prefer_gemm_jit = true;
    dnnl_->run(k, d + o0 * dtype_size(dout.dtype()), inp.data(), dweight.slice_rows(o0, o1).data(), nullptr);
  }
}

void CpuBackend::linear_weight_grad_overwrite_impl(const TensorView& dweight, const TensorView& dout,
                                                   const TensorView& inp, const TensorView&) {
  require_gemm_dtype("linear_backward", dout);
  weight_grad(dweight, dout, inp, /*accumulate=*/false);
}

void CpuBackend::linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                      const TensorView& dbias, const TensorView& dout,
                                      const TensorView& inp, const TensorView& weight) {
  require_gemm_dtype("linear_backward", dout);
  const int64_t N = inp.dim(0), C = inp.dim(1), OC = weight.dim(0);
  if (dinp.present()) {  // dinp[N,C] = dout[N,OC] · weight[OC,C]
    GemmKey k{N, OC, C, dout.dtype(), false, false, false, false};
    k.prefer_gemm_jit = true;
    dnnl_->run(k, dout.data(), weight.data(), dinp.data(), nullptr);
  }
  if (dweight.present()) weight_grad(dweight, dout, inp, /*accumulate=*/true);
  if (dbias.present()) {
    if (dout.dtype() == DType::kF32)
      column_sums(dbias.as<float>(), dout.as<float>(), N, OC);
    else
      column_sums(dbias.as<float>(), dout.as<bf16>(), N, OC);
  }
}

namespace {
// Rows [begin, end) of a row-major matrix, and matrix e of a [E, R, C] stack, as raw pointers.
const char* rows_at(const TensorView& t, int64_t begin) {
  return static_cast<const char*>(t.data()) + static_cast<size_t>(begin * t.dim(1)) * dtype_size(t.dtype());
}
const char* matrix_at(const TensorView& w, int64_t e) {
  return static_cast<const char*>(w.data()) + static_cast<size_t>(e * w.dim(1) * w.dim(2)) * dtype_size(w.dtype());
}
char* mut(const char* p) { return const_cast<char*>(p); }
}  // namespace

// One GEMM per expert with rows, each through the primitive with a runtime row count (see the top).
void CpuBackend::grouped_linear_forward_impl(const TensorView& out, const TensorView& inp,
                                             const TensorView& weight, const std::vector<int64_t>& offsets) {
  require_gemm_dtype("grouped_linear_forward", inp);
  const int64_t C = inp.dim(1), OC = weight.dim(1);
  for (int64_t e = 0; e < weight.dim(0); ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    GemmKey k{rows, C, OC, inp.dtype(), false, true, false, false};  // out_e = inp_e · weight[e]ᵀ
    k.runtime_m = true;
    dnnl_->run(k, rows_at(inp, offsets[e]), matrix_at(weight, e), mut(rows_at(out, offsets[e])), nullptr);
  }
}

void CpuBackend::grouped_linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                              const TensorView& dout, const TensorView& inp,
                                              const TensorView& weight, const std::vector<int64_t>& offsets) {
  require_gemm_dtype("grouped_linear_backward", dout);
  const int64_t C = inp.dim(1), OC = weight.dim(1);
  for (int64_t e = 0; e < weight.dim(0); ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;  // no input gradient rows, and dweight[e] += 0
    if (dinp.present()) {  // dinp_e[rows,C] = dout_e[rows,OC] · weight[e][OC,C]
      GemmKey k{rows, OC, C, dout.dtype(), false, false, false, false};
      k.runtime_m = true;
      dnnl_->run(k, rows_at(dout, offsets[e]), matrix_at(weight, e), mut(rows_at(dinp, offsets[e])), nullptr);
    }
    if (dweight.present()) {  // dweight[e][OC,C] += dout_eᵀ[OC,rows] · inp_e[rows,C]
      GemmKey k{OC, rows, C, dout.dtype(), true, false, true, false};
      k.runtime_k = true;
      dnnl_->run(k, rows_at(dout, offsets[e]), rows_at(inp, offsets[e]), mut(matrix_at(dweight, e)), nullptr);
    }
  }
}

}  // namespace lmt::kernels
