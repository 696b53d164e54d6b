// CudaBackend: the Backend interface (kernels/backend.h) on one NVIDIA GPU, registered as "cuda".
//
// GEMMs run through cuBLASLt (bf16 or full-f32 inputs, f32 accumulation and output); attention is a
// FlashAttention-2-style kernel of our own (attention.cu); norms, activations, RoPE, embeddings, the
// chunked LM-head cross-entropy, the optimizer update and the memory ops are kernels of this folder.
// The MoE router, permutation and combine are kernels of moe.cu. Every op is queued on one stream in
// call order.
//
// Which GPU: LMT_CUDA_DEVICE if set, else the process's node-local rank (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID) modulo the visible devices, else 0: one process per GPU, as mpirun and srun start
// them. Constructing the backend touches no GPU; the first op (or allocator()) initialises it.
#pragma once

#include <memory>

#include "lmt/kernels/backend.h"
#include "lmt/kernels/cuda/context.h"
#include "lmt/kernels/cuda/cuda_allocator.h"

namespace lmt::kernels::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }
  size_t workspace_bytes() const override { return ctx_.scratch_bytes; }
  Device device() const override;
  Allocator& allocator() override;
  void synchronize() override;
  // An event recorded on the stream (and on the copy stream while snapshots are unjoined); waiting
  // for it is cudaEventSynchronize (any thread).
  Fence fence() override;
  // Page-locked host memory (PinnedHostAllocator), after the GPU is chosen (a host allocation before
  // would open a context on device 0).
  Allocator& staging_allocator() override;
  Status available() const override;

  std::string device_description() override;
  // The allocator's peak plus kernel scratch and the cuBLASLt workspace.
  int64_t device_memory_peak_bytes() const override;
  // The device's free memory now (cudaMemGetInfo), named "cuda:N (GPU name)".
  MemoryTarget memory_target() override;
  // The device and compute stream (initialising the GPU on first use), for code that orders its own
  // work with the backend's: the NCCL communicator (dist/nccl) queues its collectives after and
  // before the ops of this stream.
  const Context& context() { return init(); }

 protected:
  void matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                   bool trans_b, bool accumulate) override;
  void matmul_batched_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                           bool trans_b, bool accumulate) override;
  void linear_forward_impl(const TensorView& out, const TensorView& inp, const TensorView& weight,
                           const TensorView& bias) override;
  void linear_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                            const TensorView& dout, const TensorView& inp, const TensorView& weight) override;
  // The GEMM writes dweight (beta = 0): no fill, no read of the old values.
  void linear_weight_grad_overwrite_impl(const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                                         const TensorView& weight) override;
  void embedding_forward_impl(const TensorView& out, const TensorView& ids, const TensorView& table,
                              bool accumulate) override;
  void embedding_backward_impl(const TensorView& dtable, const TensorView& dout, const TensorView& ids) override;
  void layernorm_forward_impl(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                              const TensorView& inp, const TensorView& weight, const TensorView& bias,
                              float eps) override;
  void layernorm_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                               const TensorView& dout, const TensorView& inp, const TensorView& weight,
                               const TensorView& mean, const TensorView& rstd, bool accumulate) override;
  void rmsnorm_forward_impl(const TensorView& out, const TensorView& rstd, const TensorView& inp,
                            const TensorView& weight, float eps) override;
  void rmsnorm_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                             const TensorView& inp, const TensorView& weight, const TensorView& rstd,
                             bool accumulate) override;
  void add_layernorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                  const TensorView& rstd, const TensorView& a, const TensorView& b,
                                  const TensorView& weight, const TensorView& bias, float eps) override;
  void add_rmsnorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                const TensorView& a, const TensorView& b, const TensorView& weight,
                                float eps) override;
  void activation_forward_impl(Activation act, const TensorView& out, const TensorView& inp) override;
  void activation_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                const TensorView& inp) override;
  void glu_forward_impl(Activation act, const TensorView& out, const TensorView& inp) override;
  void glu_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                         const TensorView& inp) override;
  void rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                 const RopeFreqs& freqs, bool inverse) override;
  void attention_forward_impl(AttentionBackend backend, const TensorView& out, const TensorView& lse,
                              const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& doc_ids, float scale, DType compute) override;
  void attention_backward_impl(AttentionBackend backend, const TensorView& dq, const TensorView& dk,
                               const TensorView& dv, const TensorView& dout, const TensorView& q,
                               const TensorView& k, const TensorView& v, const TensorView& out,
                               const TensorView& lse, const TensorView& doc_ids, float scale, DType compute) override;
  void attention_decode_impl(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                             const TensorView& v_cache, int64_t length, float scale) override;
  void attention_prefill_impl(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                              const TensorView& v_cache, int64_t start, float scale) override;
  // The dweight GEMM of the first chunk writes dweight (beta = 0) with dweight_write = kOverwrite.
  bool lm_head_writes_dweight_over() const override { return true; }
  void lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x, const TensorView& weight,
                                  const TensorView& targets, const CrossEntropyOptions& opts,
                                  const TensorView& dx, const TensorView& dweight) override;
  void add_impl(const TensorView& out, const TensorView& a, const TensorView& b) override;
  void convert_impl(const TensorView& out, const TensorView& inp) override;
  double sum_squares_impl(const TensorView& x) override;
  void scale_impl(const TensorView& x, float s) override;
  void axpby_impl(const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
                  const TensorView& out_bf16) override;
  void adamw_update_impl(const TensorView& param, const TensorView& grad, const TensorView& m,
                         const TensorView& v, const TensorView& param_bf16, const AdamWParams& p) override;
  void moe_router_forward_impl(const TensorView& weights, const TensorView& experts, const TensorView& probs,
                               const TensorView& lse, const TensorView& logits, const TensorView& bias,
                               bool renormalize) override;
  void moe_router_backward_impl(const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                                const TensorView& lse, const TensorView& experts, bool renormalize,
                                const TensorView& dprobs, double z_scale) override;
  void moe_gather_rows_impl(const TensorView& out, const TensorView& inp, const TensorView& rows) override;
  void moe_scatter_add_rows_impl(const TensorView& dinp, const TensorView& dout, const TensorView& rows) override;
  void moe_combine_forward_impl(const TensorView& out, const TensorView& y, const TensorView& weights,
                                const TensorView& slots) override;
  void moe_combine_backward_impl(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                                 const TensorView& y, const TensorView& weights, const TensorView& slots) override;
  void fill_impl(const TensorView& x, double value) override;
  void copy_impl(const TensorView& out, const TensorView& inp) override;
  void copy_async_impl(const TensorView& out, const TensorView& inp) override;
  void snapshot_async_impl(const TensorView& out, const TensorView& inp) override;
  void join_snapshots_impl() override;
  void positions_impl(const TensorView& out, const TensorView& given, int64_t T) override;
  int64_t count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) override;
  double sum_impl(const TensorView& x) override;

 private:
  Context& init();
  bool initialised_ = false;
  Context ctx_;
  std::unique_ptr<CudaAllocator> allocator_;
  PinnedHostAllocator pinned_;
};

}  // namespace lmt::kernels::cuda
