// CudaBackend: initialisation, the op table (each impl forwards to its kernel file through ops.h), the
// MoE ops staged through host memory, and the registration as "cuda".
#include "lmt/kernels/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "lmt/kernels/cuda/common.cuh"
#include "lmt/kernels/cuda/ops.h"
#include "lmt/kernels/registry.h"

namespace lmt::kernels::cuda {
namespace {

// LMT_CUDA_DEVICE, else the node-local rank of mpirun/srun, else 0 (modulo the visible devices).
int choose_device(int count) {
  for (const char* var : {"LMT_CUDA_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long i = std::strtol(v, &end, 10);
      LMT_CHECK(end != v && *end == '\0' && i >= 0) << var << "=" << v << " is not a device index";
      if (std::string(var) == "LMT_CUDA_DEVICE")
        LMT_CHECK(i < count) << "LMT_CUDA_DEVICE=" << i << " but " << count << " CUDA device(s) are visible";
      return static_cast<int>(i % count);
    }
  }
  return 0;
}

}  // namespace

CudaBackend::CudaBackend() = default;

CudaBackend::~CudaBackend() {
  // The backend lives until the process exits (registry.h); the driver reclaims everything then, and
  // destroying CUDA objects during static destruction can race the runtime's own teardown.
}

Status CudaBackend::available() const {
  const char* why = nullptr;
  if (visible_device_count(&why) > 0) return Status::Ok();
  return FailedPrecondition(std::string("backend 'cuda': no CUDA device is visible to this process (") +
                                (why ? why : "unknown") + ")",
                            "run on a machine with an NVIDIA GPU and its driver (check nvidia-smi and "
                            "CUDA_VISIBLE_DEVICES), or choose --backend cpu");
}

Context& CudaBackend::init() {
  if (initialised_) return ctx_;
  const char* why = nullptr;
  const int count = visible_device_count(&why);
  LMT_CHECK(count > 0) << "backend 'cuda' used without a visible CUDA device (" << (why ? why : "?")
                       << "); callers select it through find_backend(), which checks available()";
  ctx_.device = choose_device(count);
  LMT_CUDA_CHECK(cudaSetDevice(ctx_.device));
  cudaDeviceProp prop{};
  LMT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx_.device));
  ctx_.sm_count = prop.multiProcessorCount;
  ctx_.cc_major = prop.major;
  ctx_.cc_minor = prop.minor;
  // A blocking stream: it orders with the legacy default stream, which cudaMemset and plain
  // cudaMemcpy (the allocator's zero fill, host code) use.
  LMT_CUDA_CHECK(cudaStreamCreate(&ctx_.stream));
  const cublasStatus_t st = cublasLtCreate(&ctx_.lt);
  LMT_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasLtCreate failed with status " << static_cast<int>(st);
  LMT_CUDA_CHECK(cudaMalloc(&ctx_.lt_workspace, Context::kLtWorkspaceBytes));
  allocator_ = std::make_unique<CudaAllocator>(ctx_.device);
  initialised_ = true;
  return ctx_;
}

Device CudaBackend::device() const {
  return Device::cuda(initialised_ ? ctx_.device : 0);
}

Allocator& CudaBackend::allocator() {
  init();
  return *allocator_;
}

Allocator& CudaBackend::staging_allocator() {
  init();
  return pinned_;
}

void CudaBackend::synchronize() {
  if (initialised_) ctx_.sync();
}

Fence CudaBackend::fence() {
  if (!initialised_) return Fence();  // nothing was queued
  // The waiting thread (the checkpoint writer) selects this backend's GPU first: a runtime call on
  // a thread with no current device would open a context on device 0.
  const int device = ctx_.device;
  auto recorded_on = [device](cudaStream_t stream) {
    cudaEvent_t ev = nullptr;
    LMT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    LMT_CUDA_CHECK(cudaEventRecord(ev, stream));
    return std::shared_ptr<CUevent_st>(ev, [device](cudaEvent_t e) {
      cudaSetDevice(device);
      cudaEventDestroy(e);
    });
  };
  // Unjoined snapshots run on the copy stream, which the compute stream has not waited for yet.
  std::shared_ptr<CUevent_st> compute = recorded_on(ctx_.stream);
  std::shared_ptr<CUevent_st> copies = ctx_.snapshots_pending ? recorded_on(ctx_.copy_stream) : nullptr;
  return Fence([compute, copies, device] {
    LMT_CUDA_CHECK(cudaSetDevice(device));
    LMT_CUDA_CHECK(cudaEventSynchronize(compute.get()));
    if (copies) LMT_CUDA_CHECK(cudaEventSynchronize(copies.get()));
  });
}

int64_t CudaBackend::device_memory_peak_bytes() const {
  if (!initialised_) return 0;
  return static_cast<int64_t>(allocator_->peak_bytes() + ctx_.scratch_bytes + Context::kLtWorkspaceBytes);
}

MemoryTarget CudaBackend::memory_target() {
  init();
  size_t free_b = 0, total_b = 0;
  LMT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {static_cast<double>(free_b), device().to_string() + " (" + device_description() + ")"};
}

std::string CudaBackend::device_description() {
  init();
  cudaDeviceProp prop{};
  LMT_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx_.device));
  return prop.name;
}

// ---- the op table -------------------------------------------------------------------------------
void CudaBackend::matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool ta, bool tb,
                              bool acc) {
  cuda::matmul(init(), c, a, b, ta, tb, acc);
}
void CudaBackend::matmul_batched_impl(const TensorView& c, const TensorView& a, const TensorView& b, bool ta,
                                      bool tb, bool acc) {
  cuda::matmul(init(), c, a, b, ta, tb, acc);
}
void CudaBackend::linear_forward_impl(const TensorView& out, const TensorView& inp, const TensorView& weight,
                                      const TensorView& bias) {
  if (inp.dtype() != weight.dtype()) {  // weight-only bf16 (decoding): widen the weight exactly, in scratch
    Context& ctx = init();
    const TensorView wide(ctx.scratch(static_cast<size_t>(weight.numel()) * sizeof(float)), weight.shape(),
                          DType::kF32, weight.device());
    cuda::convert(ctx, wide, weight);
    cuda::linear_forward(ctx, out, inp, wide, bias);  // gemm() takes no scratch: `wide` stays valid
    return;
  }
  cuda::linear_forward(init(), out, inp, weight, bias);
}
void CudaBackend::linear_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                                       const TensorView& dout, const TensorView& inp, const TensorView& weight) {
  cuda::linear_backward(init(), dinp, dweight, dbias, dout, inp, weight);
}
void CudaBackend::linear_weight_grad_overwrite_impl(const TensorView& dweight, const TensorView& dout,
                                                    const TensorView& inp, const TensorView&) {
  cuda::linear_weight_grad(init(), dweight, dout, inp, /*accumulate=*/false);
}
void CudaBackend::embedding_forward_impl(const TensorView& out, const TensorView& ids, const TensorView& table,
                                         bool accumulate) {
  cuda::embedding_forward(init(), out, ids, table, accumulate);
}
void CudaBackend::embedding_backward_impl(const TensorView& dtable, const TensorView& dout, const TensorView& ids) {
  cuda::embedding_backward(init(), dtable, dout, ids);
}
void CudaBackend::layernorm_forward_impl(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                                         const TensorView& inp, const TensorView& weight, const TensorView& bias,
                                         float eps) {
  cuda::layernorm_forward(init(), out, mean, rstd, inp, weight, bias, eps);
}
void CudaBackend::layernorm_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                                          const TensorView& dout, const TensorView& inp, const TensorView& weight,
                                          const TensorView& mean, const TensorView& rstd, bool accumulate) {
  cuda::layernorm_backward(init(), dinp, dweight, dbias, dout, inp, weight, mean, rstd, accumulate);
}
void CudaBackend::rmsnorm_forward_impl(const TensorView& out, const TensorView& rstd, const TensorView& inp,
                                       const TensorView& weight, float eps) {
  cuda::rmsnorm_forward(init(), out, rstd, inp, weight, eps);
}
void CudaBackend::rmsnorm_backward_impl(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                                        const TensorView& inp, const TensorView& weight, const TensorView& rstd,
                                        bool accumulate) {
  cuda::rmsnorm_backward(init(), dinp, dweight, dout, inp, weight, rstd, accumulate);
}
void CudaBackend::add_layernorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                             const TensorView& rstd, const TensorView& a, const TensorView& b,
                                             const TensorView& weight, const TensorView& bias, float eps) {
  cuda::add_layernorm_forward(init(), sum, out, mean, rstd, a, b, weight, bias, eps);
}
void CudaBackend::add_rmsnorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                           const TensorView& a, const TensorView& b, const TensorView& weight,
                                           float eps) {
  cuda::add_rmsnorm_forward(init(), sum, out, rstd, a, b, weight, eps);
}
void CudaBackend::activation_forward_impl(Activation act, const TensorView& out, const TensorView& inp) {
  cuda::activation_forward(init(), act, out, inp);
}
void CudaBackend::activation_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                           const TensorView& inp) {
  cuda::activation_backward(init(), act, dinp, dout, inp);
}
void CudaBackend::glu_forward_impl(Activation act, const TensorView& out, const TensorView& inp) {
  cuda::glu_forward(init(), act, out, inp);
}
void CudaBackend::glu_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                    const TensorView& inp) {
  cuda::glu_backward(init(), act, dinp, dout, inp);
}
void CudaBackend::rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                            const RopeFreqs& freqs, bool inverse) {
  cuda::rope(init(), out, inp, positions, freqs, inverse);
}
// kNaive and kFlash are the same tiled kernels here: the naive variant exists to check a flash kernel
// on CPUs; on the GPU the T×T buffer would only cost memory. compute picks f32 SIMT or bf16 tensor
// cores (attention.cu says which head dims the latter covers).
void CudaBackend::attention_forward_impl(AttentionBackend, const TensorView& out, const TensorView& lse,
                                         const TensorView& q, const TensorView& k, const TensorView& v,
                                         const TensorView& doc_ids, float scale, DType compute) {
  cuda::attention_forward(init(), out, lse, q, k, v, doc_ids, scale, compute);
}
void CudaBackend::attention_backward_impl(AttentionBackend, const TensorView& dq, const TensorView& dk,
                                          const TensorView& dv, const TensorView& dout, const TensorView& q,
                                          const TensorView& k, const TensorView& v, const TensorView& out,
                                          const TensorView& lse, const TensorView& doc_ids, float scale,
                                          DType compute) {
  cuda::attention_backward(init(), dq, dk, dv, dout, q, k, v, out, lse, doc_ids, scale, compute);
}
void CudaBackend::attention_decode_impl(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                                        const TensorView& v_cache, int64_t length, float scale) {
  cuda::attention_decode(init(), out, q, k_cache, v_cache, length, scale);
}
void CudaBackend::attention_prefill_impl(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                                         const TensorView& v_cache, int64_t start, float scale) {
  cuda::attention_prefill(init(), out, q, k_cache, v_cache, start, scale);
}
void CudaBackend::lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x, const TensorView& weight,
                                             const TensorView& targets, const CrossEntropyOptions& opts,
                                             const TensorView& dx, const TensorView& dweight) {
  cuda::lm_head_cross_entropy(init(), losses, x, weight, targets, opts, dx, dweight);
}
void CudaBackend::add_impl(const TensorView& out, const TensorView& a, const TensorView& b) { cuda::add(init(), out, a, b); }
void CudaBackend::convert_impl(const TensorView& out, const TensorView& inp) { cuda::convert(init(), out, inp); }
double CudaBackend::sum_squares_impl(const TensorView& x) { return cuda::sum_squares(init(), x); }
void CudaBackend::scale_impl(const TensorView& x, float s) { cuda::scale(init(), x, s); }
void CudaBackend::axpby_impl(const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
                             const TensorView& out_bf16) {
  cuda::axpby(init(), out, alpha, x, beta, y, out_bf16);
}
void CudaBackend::adamw_update_impl(const TensorView& param, const TensorView& grad, const TensorView& m,
                                    const TensorView& v, const TensorView& param_bf16, const AdamWParams& p) {
  cuda::adamw_update(init(), param, grad, m, v, param_bf16, p);
}
void CudaBackend::fill_impl(const TensorView& x, double value) { cuda::fill(init(), x, value); }
void CudaBackend::copy_impl(const TensorView& out, const TensorView& inp) { cuda::copy(init(), out, inp); }
void CudaBackend::copy_async_impl(const TensorView& out, const TensorView& inp) {
  cuda::copy_async(init(), out, inp);
}
void CudaBackend::snapshot_async_impl(const TensorView& out, const TensorView& inp) {
  cuda::snapshot_async(init(), out, inp);
}
void CudaBackend::join_snapshots_impl() {
  if (initialised_) cuda::join_snapshots(ctx_);
}
void CudaBackend::positions_impl(const TensorView& out, const TensorView& given, int64_t T) {
  cuda::positions(init(), out, given, T);
}
int64_t CudaBackend::count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) {
  return cuda::count_valid_targets(init(), targets, ignore_index);
}
double CudaBackend::sum_impl(const TensorView& x) { return cuda::sum(init(), x); }

// ---- MoE: moe.cu (f32; the gather also bf16) -------------------------------------------------------
void CudaBackend::moe_router_forward_impl(const TensorView& weights, const TensorView& experts,
                                          const TensorView& probs, const TensorView& lse, const TensorView& logits,
                                          const TensorView& bias, bool renormalize) {
  cuda::moe_router_forward(init(), weights, experts, probs, lse, logits, bias, renormalize);
}
void CudaBackend::moe_router_backward_impl(const TensorView& dlogits, const TensorView& dweights,
                                           const TensorView& probs, const TensorView& lse, const TensorView& experts,
                                           bool renormalize, const TensorView& dprobs, double z_scale) {
  cuda::moe_router_backward(init(), dlogits, dweights, probs, lse, experts, renormalize, dprobs, z_scale);
}
void CudaBackend::moe_gather_rows_impl(const TensorView& out, const TensorView& inp, const TensorView& rows) {
  cuda::moe_gather_rows(init(), out, inp, rows);
}
void CudaBackend::moe_scatter_add_rows_impl(const TensorView& dinp, const TensorView& dout, const TensorView& rows) {
  // dinp[rows[r], :] += dout[r, :] is the embedding's backward with dinp as the table: its sorted runs
  // sum each row's contributions in order, without float atomics.
  cuda::embedding_backward(init(), dinp, dout, rows);
}
void CudaBackend::moe_combine_forward_impl(const TensorView& out, const TensorView& y, const TensorView& weights,
                                           const TensorView& slots) {
  cuda::moe_combine_forward(init(), out, y, weights, slots);
}
void CudaBackend::moe_combine_backward_impl(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                                            const TensorView& y, const TensorView& weights, const TensorView& slots) {
  cuda::moe_combine_backward(init(), dy, dweights, dout, y, weights, slots);
}

}  // namespace lmt::kernels::cuda

LMT_REGISTER_BACKEND(cuda, [] { return std::make_unique<lmt::kernels::cuda::CudaBackend>(); });
