// CpuBackend: the fast CPU implementation. GEMMs go through oneDNN (primitives cached per shape and
// dtype; bf16 dispatches to AMX or AVX512-BF16 where the CPU has them); everything else is OpenMP +
// AVX-512 code in this folder, one op family per file. Supports f32 activations and f32/bf16 GEMM
// inputs; f64 is the ref backend's business and is rejected with a message naming the op.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>  // rope cache (cpu/rope.cpp)

#include "lmt/kernels/backend.h"

namespace lmt::kernels {

// out[N,OC] = inp[N,C] (f32) · weight[OC,C] (bf16 bits)ᵀ + bias[OC] (f32, may be null), f32
// accumulation (cpu/linear_bf16w.cpp): linear_forward with bf16 weights and f32 activations.
void linear_forward_bf16_weights(float* out, const float* inp, const uint16_t* weight, const float* bias, int64_t N,
                                 int64_t C, int64_t OC);

// How the cpu backend runs GEMMs with bf16 operands: on oneDNN's bf16 matmul (AMX tiles or
// AVX512-BF16 dot products), or with the operands widened to f32 (exact) on the fp32 FMA units. The
// two give the same products up to f32 summation order; only the speed differs. kNative still widens
// where oneDNN has no bf16 matmul (AVX2-only CPUs).
enum class CpuBf16Gemms { kNative, kWidened };

// The process's choice, settled at its first bf16 GEMM: LMT_CPU_BF16_GEMM=native|widened where set
// (anything else is a warning, then ignored); else the answer of the chooser set here, where one is
// (lmtrain's: kWidened where the measured peaks say the bf16 unit is slower than the fp32 FMAs,
// metrics::with_fastest_bf16()); else kNative. A chooser set after that first GEMM is not asked.
void set_cpu_bf16_gemm_chooser(CpuBf16Gemms (*chooser)());
CpuBf16Gemms cpu_bf16_gemms();

// Not final: tests derive a backend that marks its host memory as another device
// (tests/train/trainer_backend_test.cpp) to run the device staging paths on CPUs.
class CpuBackend : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  std::string_view name() const override { return "cpu"; }
  size_t workspace_bytes() const override { return workspace_size_; }
  // Whether bf16 GEMMs run on oneDNN's bf16 matmul (true), or widened to f32 (false): widened where
  // oneDNN has no bf16 matmul (found out once by creating one) or where cpu_bf16_gemms() or
  // set_bf16_gemms() chose kWidened (cpu/matmul.cpp).
  bool native_bf16_gemms() const override;
  // This backend's own choice instead of the process's cpu_bf16_gemms() (tests run both paths).
  void set_bf16_gemms(CpuBf16Gemms mode);

  // Scratch memory of at least `bytes` (64-byte aligned), reused across calls: valid until the next
  // call to workspace(). Grows monotonically, so steady-state training never allocates.
  void* workspace(size_t bytes);

  // How many oneDNN GEMM primitives are cached (one per shape; cpu/matmul.cpp). Steady-state
  // training, MoE routing included, stops adding to it after the first step.
  size_t cached_gemm_primitives() const;

 protected:
  void matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                   bool trans_b, bool accumulate) override;
  // One oneDNN primitive with a batch dimension (cpu/matmul.cpp).
  void matmul_batched_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                           bool trans_b, bool accumulate) override;
  // The lower triangle in blocks of rows, one batched primitive each, then mirrored (cpu/matmul.cpp).
  void matmul_batched_symmetric_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                                     bool trans_b) override;
  void linear_forward_impl(const TensorView& out, const TensorView& inp, const TensorView& weight,
                           const TensorView& bias) override;
  void linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                            const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                            const TensorView& weight) override;
  // The weight gradient's GEMMs with oneDNN's output written, not added to (cpu/matmul.cpp).
  void linear_weight_grad_overwrite_impl(const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                                         const TensorView& weight) override;
  // MoE routing ops (cpu/moe.cpp): the shared host implementations, run on blocks of rows in parallel.
  void moe_router_forward_impl(const TensorView& weights, const TensorView& experts, const TensorView& probs,
                               const TensorView& lse, const TensorView& logits, const TensorView& bias,
                               bool renormalize) override;
  void moe_router_backward_impl(const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                                const TensorView& lse, const TensorView& experts, bool renormalize,
                                const TensorView& dprobs, double z_scale) override;
  void moe_gather_rows_impl(const TensorView& out, const TensorView& inp, const TensorView& row_ids) override;
  void moe_scatter_add_rows_impl(const TensorView& dinp, const TensorView& dout, const TensorView& row_ids) override;
  void moe_combine_forward_impl(const TensorView& out, const TensorView& y, const TensorView& weights,
                                const TensorView& slots) override;
  void moe_combine_backward_impl(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                                 const TensorView& y, const TensorView& weights, const TensorView& slots) override;
  // MoE experts' GEMMs (cpu/matmul.cpp): one oneDNN call per expert with rows, through primitives
  // whose row count is a runtime dimension (one primitive per weight shape, whatever the routing).
  void grouped_linear_forward_impl(const TensorView& out, const TensorView& inp, const TensorView& weight,
                                   const std::vector<int64_t>& offsets) override;
  void grouped_linear_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                                    const TensorView& inp, const TensorView& weight,
                                    const std::vector<int64_t>& offsets) override;
  void embedding_forward_impl(const TensorView& out, const TensorView& ids, const TensorView& table,
                              bool accumulate) override;
  void embedding_backward_impl(const TensorView& dtable, const TensorView& dout,
                               const TensorView& ids) override;
  void layernorm_forward_impl(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                              const TensorView& inp, const TensorView& weight,
                              const TensorView& bias, float eps) override;
  void layernorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                               const TensorView& dbias, const TensorView& dout,
                               const TensorView& inp, const TensorView& weight,
                               const TensorView& mean, const TensorView& rstd,
                               bool accumulate) override;
  void rmsnorm_forward_impl(const TensorView& out, const TensorView& rstd, const TensorView& inp,
                            const TensorView& weight, float eps) override;
  void rmsnorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                             const TensorView& dout, const TensorView& inp,
                             const TensorView& weight, const TensorView& rstd,
                             bool accumulate) override;
  void add_layernorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                  const TensorView& rstd, const TensorView& a, const TensorView& b,
                                  const TensorView& weight, const TensorView& bias, float eps) override;
  void add_rmsnorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                const TensorView& a, const TensorView& b, const TensorView& weight,
                                float eps) override;
  void activation_forward_impl(Activation act, const TensorView& out,
                               const TensorView& inp) override;
  void activation_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                const TensorView& inp) override;
  void glu_forward_impl(Activation act, const TensorView& out, const TensorView& inp) override;
  void glu_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                         const TensorView& inp) override;
  void rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                 const RopeFreqs& freqs, bool inverse) override;
  void attention_forward_impl(AttentionBackend backend, const TensorView& out,
                              const TensorView& lse, const TensorView& q, const TensorView& k,
                              const TensorView& v, const TensorView& doc_ids, float scale, DType compute) override;
  void attention_backward_impl(AttentionBackend backend, const TensorView& dq,
                               const TensorView& dk, const TensorView& dv, const TensorView& dout,
                               const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse,
                               const TensorView& doc_ids, float scale, DType compute) override;
  void attention_decode_impl(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                             const TensorView& v_cache, int64_t length, float scale) override;
  void attention_prefill_impl(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                              const TensorView& v_cache, int64_t start, float scale) override;
  bool lm_head_writes_dweight_over() const override { return true; }
  void lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x,
                                  const TensorView& weight, const TensorView& targets,
                                  const CrossEntropyOptions& opts, const TensorView& dx,
                                  const TensorView& dweight) override;
  void add_impl(const TensorView& out, const TensorView& a, const TensorView& b) override;
  void convert_impl(const TensorView& out, const TensorView& inp) override;
  double sum_squares_impl(const TensorView& x) override;
  void scale_impl(const TensorView& x, float s) override;
  void axpby_impl(const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
                  const TensorView& out_bf16) override;
  void adamw_update_impl(const TensorView& param, const TensorView& grad, const TensorView& m,
                         const TensorView& v, const TensorView& param_bf16,
                         const AdamWParams& p) override;
  void fill_impl(const TensorView& x, double value) override;
  void copy_impl(const TensorView& out, const TensorView& inp) override;
  void positions_impl(const TensorView& out, const TensorView& given, int64_t T) override;
  int64_t count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) override;
  double sum_impl(const TensorView& x) override;

 private:
  struct Dnnl;  // oneDNN engine, stream and primitive cache (cpu/matmul.cpp)
  std::unique_ptr<Dnnl> dnnl_;
  struct FreeWorkspace {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeWorkspace> workspace_;
  size_t workspace_size_ = 0;

  // dweight[OC,C] (+)= doutᵀ · inp[N,C], the weight gradient's GEMMs (cpu/matmul.cpp).
  void weight_grad(const TensorView& dweight, const TensorView& dout, const TensorView& inp, bool accumulate);

  // Where bf16 GEMM operands are widened to f32 (no bf16 matmul on this CPU): while a WidenPin
  // lives, the bf16 B operand stored at `b` (a weight the caller reads over several GEMMs and does
  // not change meanwhile: the LM head's W over its row chunks, a weight gradient's input over its
  // row blocks) is widened once, at its first GEMM, and reused by the others. Pins nest; elsewhere
  // a no-op (cpu/matmul.cpp). Each nesting depth keeps its buffer for the next pin: the LM head's
  // holds V·C floats for the backend's life (154 MB for GPT-2), as the unpinned widening's did.
  class WidenPin {
   public:
    WidenPin(CpuBackend& backend, const void* b);
    ~WidenPin();
    WidenPin(const WidenPin&) = delete;
    WidenPin& operator=(const WidenPin&) = delete;

   private:
    Dnnl* dnnl_;
  };

  // rope cache (cpu/rope.cpp): scaling·cos/sin of pos·inv_freq[i] for pos in [0, positions),
  // computed in f64 and stored f32 as rows [pos][cos 0..half | sin 0..half]. Rebuilt when the
  // frequencies change or a larger position is seen.
  const float* rope_table(const RopeFreqs& freqs, int64_t max_position);
  std::vector<float> rope_table_;
  RopeFreqs rope_freqs_;
  int64_t rope_positions_ = 0;

  friend struct CpuGemm;  // cpu/matmul.cpp helpers reach dnnl_
};

// The best instruction set oneDNN uses for GEMMs here: "avx512_core_amx" means bf16 GEMMs run on
// AMX tiles, "avx512_core_bf16" on AVX512-BF16 dot products.
std::string cpu_gemm_isa();

// Whether oneDNN's GEMMs here compute each row of C, and each matrix of a batched product, the same
// whatever the other rows and matrices: true on AVX-512 (its brgemm and avx512 gemm kernels, tested
// bit for bit), false on AVX2-only CPUs, where oneDNN's sgemm takes other kernels below 4 rows and
// splits the reduction across threads by the row count (oneDNN 2.6, Zen 3: row 0 of a [M,768]·[768,64]
// product changes bits between M = 4..6 and M ≥ 7 on two threads). Batched products stay
// batch-invariant either way (matmul_batched runs one matrix at a time where this is false); what
// varies there is a row's result with its batch-mates, by float rounding (eval's scoring, docs/EVAL.md).
bool cpu_gemm_rows_independent();

// Stops with "kernel '<op>': the cpu backend does not support <dtype> ..." unless t is f32 (or absent).
void cpu_require_f32(const char* op, const TensorView& t);
// out[i] = bf16(in[i]), round to nearest even (convert's f32 -> bf16 span, one thread).
void cpu_f32_to_bf16(uint16_t* out, const float* in, int64_t n);
// out[i] = float(in[i]) (exact; one thread).
void cpu_bf16_to_f32(float* out, const uint16_t* in, int64_t n);

}  // namespace lmt::kernels
