// RefBackend: the test oracle. Plain loops, every sum accumulated in f64, any float dtype
// (f32, bf16, f64) read and written through element accessors. Obviously correct, never fast.
// It recomputes what it needs (e.g. norm statistics, attention probabilities) from the primal
// inputs in f64 instead of trusting saved f32 values, so it checks what a fast backend saves too.
#pragma once

#include "lmt/kernels/backend.h"

namespace lmt::kernels {

class RefBackend final : public Backend {
 public:
  std::string_view name() const override { return "ref"; }
  bool has_flash_attention() const override { return false; }

 protected:
  void matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                   bool trans_b, bool accumulate) override;
  void linear_forward_impl(const TensorView& out, const TensorView& inp, const TensorView& weight,
                           const TensorView& bias) override;
  void linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                            const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                            const TensorView& weight) override;
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
  void lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x,
                                  const TensorView& weight, const TensorView& targets,
                                  const CrossEntropyOptions& opts, const TensorView& dx,
                                  const TensorView& dweight) override;
  void add_impl(const TensorView& out, const TensorView& a, const TensorView& b) override;
  void convert_impl(const TensorView& out, const TensorView& inp) override;
  double sum_squares_impl(const TensorView& x) override;
  void scale_impl(const TensorView& x, float s) override;
  void adamw_update_impl(const TensorView& param, const TensorView& grad, const TensorView& m,
                         const TensorView& v, const TensorView& param_bf16,
                         const AdamWParams& p) override;
  void fill_impl(const TensorView& x, double value) override;
  void copy_impl(const TensorView& out, const TensorView& inp) override;
  void positions_impl(const TensorView& out, const TensorView& given, int64_t T) override;
  int64_t count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) override;
  double sum_impl(const TensorView& x) override;
};

}  // namespace lmt::kernels
