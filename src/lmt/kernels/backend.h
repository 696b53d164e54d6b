// The kernel interface: forward/backward pairs for every op family a decoder-only transformer needs.
//
// One interface, several implementations (kernels/ref: plain loops with fp64 accumulation, the test
// oracle; kernels/cpu: oneDNN + OpenMP + AVX-512; kernels/cuda later). Model code calls a Backend&
// and never knows which one it has.
//
// Letters used in shapes (defined once here):
//   B batch, T time (sequence), C channels (model width), OC output channels, N = B*T rows,
//   V vocabulary, H hidden width of the FFN, NH query heads, G key/value heads (NH % G == 0),
//   HD head dim, M/K rows/inner dim of a plain GEMM, n length of a flat span.
//
// Tensors are contiguous row-major TensorViews. A default-constructed view means "absent" and is
// allowed only where an argument says "optional".
//
// Gradient contract (as in llm.c): parameter gradients ACCUMULATE (+=) so that micro-batches and
// tied weights add up; activation gradients OVERWRITE (=), except where an argument says
// `accumulate`, which the model uses for the residual stream.
//
// Dtypes: activations and gradients are f32; GEMM-like inputs (matmul, linear, lm_head) may be bf16
// (products accumulate in f32). The ref backend also takes f64 everywhere (finite-difference tests).
// Integer inputs (ids, positions, targets, doc ids) are i32.
//
// Errors: a shape or dtype that does not fit the contract stops the process with a message naming the
// op and every argument's dtype and shape (LMT_CHECK semantics: this is a programming error, never
// user input). Validation happens once here, in the non-virtual entry points, for every backend.
//
// Threading: a backend is called from one thread at a time; it parallelises internally (OpenMP).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmt/base/limits.h"
#include "lmt/base/status.h"
#include "lmt/tensor/allocator.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::kernels {

enum class Activation : uint8_t { kGeluTanh, kSilu, kRelu };
enum class AttentionBackend : uint8_t { kNaive, kFlash };
// How a kernel writes a gradient it produces: added to what the buffer holds, or over it.
enum class GradWrite : uint8_t { kAccumulate, kOverwrite };

std::string_view activation_name(Activation a);
std::string_view attention_backend_name(AttentionBackend a);

// RoPE frequencies: pair i < rotary_dim/2 of each head turns by the angle pos · inv_freq[i], and both
// cos and sin are multiplied by attention_scaling (YaRN's magnitude correction; 1 otherwise), as in
// Hugging Face's rotary embeddings. The model computes them on the host from its config
// (model/rope.h: plain, linear, dynamic NTK, YaRN, Llama 3); plain RoPE is from_theta.
struct RopeFreqs {
  std::vector<double> inv_freq;     // [rotary_dim/2], each finite and >= 0
  double attention_scaling = 1.0;   // finite, > 0

  int64_t rotary_dim() const { return 2 * static_cast<int64_t>(inv_freq.size()); }
  // inv_freq[i] = theta^(-2i/rotary_dim), scaling 1.
  static RopeFreqs from_theta(double theta, int64_t rotary_dim);
  bool operator==(const RopeFreqs&) const = default;
};

struct CrossEntropyOptions {
  int64_t vocab_size = 0;     // V: logits are computed for weight rows [0, V); rows >= V are padding
  float z_loss = 0.0f;        // adds z_loss * logsumexp^2 per token (PaLM); 0 disables
  int32_t ignore_index = -100;  // targets equal to this contribute no loss and no gradient
  float grad_scale = 1.0f;    // d(total objective)/d(loss of one token), e.g. 1/num_valid_tokens
  int64_t chunk_rows = 256;   // rows of logits materialised at a time (memory: chunk_rows * V floats)
  // kOverwrite: dweight's rows [0, V) are written over, whatever they held (the first write of a
  // gradient that model::Transformer::zero_grads left unzeroed), not added to.
  GradWrite dweight_write = GradWrite::kAccumulate;
  // Vocabulary parallelism (model/tensor_parallel.h): the weight's rows [0, V) are the global
  // vocabulary ids [vocab_begin, vocab_begin + V) of a vocabulary split over ranks; a target outside
  // them is another rank's (no -1 in its gradient here). For each chunk of rows [row0, row0 + rows),
  // combine(row0, lse, target_logit) receives this rank's log-sum-exp and target logit per row
  // (lse, target_logit: [rows] f32, contiguous, in this backend's memory: device memory on a device
  // backend; the target logit is 0 where the target is another rank's; rows with ignored targets
  // carry meaningless values) and replaces both, in place, with the whole vocabulary's; the losses
  // and gradients then use those (softmax over the whole vocabulary). dx is then this rank's part of
  // the input gradient (the caller sums it over the ranks). combine may call this backend's copy(),
  // not its other ops (they may reuse the op's scratch). Empty combine: a whole vocabulary.
  int64_t vocab_begin = 0;
  std::function<void(int64_t row0, const TensorView& lse, const TensorView& target_logit)> combine;
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: param -= lr * weight_decay * param
  int64_t step = 1;           // 1-based step, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (e.g. the clipping factor)
};

// What Backend::fence() returns: wait() blocks until every op issued before the fence has finished.
// A default Fence has nothing to wait for. Copies share one wait; any thread may call it, any number
// of times.
class Fence {
 public:
  Fence() = default;
  explicit Fence(std::function<void()> wait) : wait_(std::move(wait)) {}
  void wait() const {
    if (wait_) wait_();
  }

 private:
  std::function<void()> wait_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Bytes of scratch the backend currently holds (reused across calls, grown on demand).
  virtual size_t workspace_bytes() const { return 0; }
  // Whether AttentionBackend::kFlash is a real tiled kernel here (the ref oracle computes both
  // backends with the same exact loops, so it says no).
  virtual bool has_flash_attention() const { return true; }
  // Whether bf16 GEMM operands are native here, i.e. faster than f32 ones: false where the backend
  // widens them to f32 first (cpu on CPUs without AVX512-BF16 or AMX). Callers that pick bf16 only
  // for speed (Muon's Newton–Schulz, optim/muon.h) take f32 where this is false.
  virtual bool native_bf16_gemms() const { return true; }

  // ---- where the backend computes ---------------------------------------------------------------
  // Every tensor handed to an op must live on device() (host memory for cpu and ref; CUDA memory for
  // cuda), except copy(), which also moves data between the host and device(). allocator() hands out
  // device() memory: the model, the optimizer and the trainer take their Tensors and Arenas from it.
  virtual Device device() const { return Device::host(); }
  virtual Allocator& allocator() { return host_allocator(); }
  // Ops may run asynchronously on a device (ops that return a value to the host wait for their own
  // result); synchronize() waits until every queued op has finished. Timing code calls it.
  virtual void synchronize() {}
  // A wait for the ops issued so far, for another thread (e.g. the checkpoint writer waiting for
  // copy_async's snapshot while this thread queues the next step). Host backends finish every op
  // before returning: nothing to wait for.
  virtual Fence fence() { return Fence(); }
  // Page-locked host memory for transfers between the host and device() (checkpoint snapshots):
  // copies from and to it run at the link's full speed and without the host waiting. Host memory on
  // host backends. Its tensors are host tensors (Device::host()).
  virtual Allocator& staging_allocator() { return host_allocator(); }
  // Whether this backend can run in this process: a GPU backend without a visible GPU says why.
  // find_backend() returns this status for a name the user gave.
  virtual Status available() const { return Status::Ok(); }
  // The accelerator's own name (e.g. "NVIDIA H100 80GB HBM3"; empty for host backends): MFU looks up
  // its dense peak in metrics/device_peaks.h by it.
  virtual std::string device_description() { return {}; }
  // The most device memory this backend has held at once (0 for host backends: see peak RSS).
  virtual int64_t device_memory_peak_bytes() const { return 0; }
  // The memory this backend's tensors take, for memory checks before allocating (base/limits.h):
  // this machine's for host backends; the device's free memory otherwise.
  virtual MemoryTarget memory_target() { return {}; }

  // ---- GEMM -------------------------------------------------------------------------------------
  // c[M,N] (f32, or f64 with f64 inputs) = op(a) · op(b)  (+ c if accumulate)
  // a: [M,K] or, with trans_a, [K,M];  b: [K,N] or, with trans_b, [N,K];  a and b share a dtype.
  void matmul(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
              bool trans_b, bool accumulate);
  // The same for a stack of nb independent products (Muon's Newton–Schulz over all matrices of one
  // shape): c[nb,M,N] (f32) = op(a[i]) · op(b[i]) (+ c[i] if accumulate) for each i < nb, with
  // a [nb,M,K] or [nb,K,M] and b [nb,K,N] or [nb,N,K]. Each c[i] equals, bit for bit, what matmul
  // gives for that product alone (so the batch a matrix lands in never changes its result). The
  // default implementation loops over matmul; a backend may run one batched primitive instead.
  void matmul_batched(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                      bool trans_b, bool accumulate);
  // A stack of products whose exact values the caller knows to be symmetric (XXᵀ, XᵀX, or the
  // product of two commuting symmetric matrices: Muon's Gram matrices and their polynomials):
  // c[nb,M,M] (f32) = op(a[i]) · op(b[i]), with a [nb,M,K] or [nb,K,M] and b [nb,K,M] or [nb,M,K].
  // A backend may compute only the lower triangle, in blocks of rows, and mirror it into the upper
  // one (the cpu backend does for M >= 2·kSymmetricBlockMin: ~5/8 of the FLOPs), so c[i] is then
  // exactly symmetric and equal to the whole product's lower triangle up to summation order. The
  // default is matmul_batched (the whole product). Each c[i] does not depend on its batch.
  void matmul_batched_symmetric(const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a,
                                bool trans_b);
  static constexpr int64_t kSymmetricBlockMin = 64;

  // ---- linear (nn.Linear layout: weight[OC,C]) ------------------------------------------------
  // out[N,OC] (f32) = inp[N,C] · weight[OC,C]ᵀ + bias[OC] (bias optional, f32). inp and weight share
  // a dtype, or inp is f32 and weight bf16 (weight-only bf16, decoding: the weight is widened
  // exactly, the product taken and accumulated in f32; the activations are not rounded).
  void linear_forward(const TensorView& out, const TensorView& inp, const TensorView& weight,
                      const TensorView& bias);
  // dinp[N,C] = dout · weight (f32, overwrite; optional)
  // dweight[OC,C] += doutᵀ · inp (f32; optional);  dbias[OC] += Σ_n dout[n,:] (f32; optional)
  // With dweight_write = GradWrite::kOverwrite, dweight = doutᵀ · inp instead, whatever dweight held
  // (NaN included): the first write of a gradient that was not zeroed (model::Transformer::
  // zero_grads); a GEMM that writes its output need not read it. dbias still accumulates.
  // dout, inp and weight share a dtype (f32 or bf16). The input gradient and the weight/bias
  // gradients are two linear_backward_impl calls (profile families gemm_dx and gemm_dw).
  void linear_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                       const TensorView& dout, const TensorView& inp, const TensorView& weight,
                       GradWrite dweight_write = GradWrite::kAccumulate);

  // ---- embedding --------------------------------------------------------------------------------
  // out[N,C] (= or += if accumulate) table[ids[n], :]; ids i32 in [0, V). Used for token and
  // learned position embeddings (ids = positions, accumulate = true).
  void embedding_forward(const TensorView& out, const TensorView& ids, const TensorView& table,
                         bool accumulate);
  // dtable[V,C] += scatter-add of dout[N,C] at rows ids[N].
  void embedding_backward(const TensorView& dtable, const TensorView& dout, const TensorView& ids);

  // ---- normalisation ----------------------------------------------------------------------------
  // The forward ops' `out` is inp's dtype, or bf16 for an f32 inp: the f32 result rounded once, bit
  // for bit what convert() of the f32 output gives (bf16 runs feed it straight to the next GEMM).
  // out[N,C] = (inp - mean) * rstd * weight[C] + bias[C] (bias optional); saves mean[N], rstd[N].
  void layernorm_forward(const TensorView& out, const TensorView& mean, const TensorView& rstd,
                         const TensorView& inp, const TensorView& weight, const TensorView& bias,
                         float eps);
  // dinp[N,C] (= or += if accumulate), dweight[C] +=, dbias[C] += (optional). mean and rstd are
  // forward's; a backend may recompute mean from inp (both given backends do), never rstd (eps).
  void layernorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                          const TensorView& dout, const TensorView& inp, const TensorView& weight,
                          const TensorView& mean, const TensorView& rstd, bool accumulate);
  // out[N,C] = inp * rstd * weight[C], rstd = 1/sqrt(mean(inp²) + eps); saves rstd[N].
  // QK-norm uses it with N = rows*heads and C = HD.
  void rmsnorm_forward(const TensorView& out, const TensorView& rstd, const TensorView& inp,
                       const TensorView& weight, float eps);
  void rmsnorm_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                        const TensorView& inp, const TensorView& weight, const TensorView& rstd,
                        bool accumulate);
  // The residual add fused with the norm that follows it (one pass over the stream instead of two):
  // sum[N,C] = a + b, then the norm of sum exactly as layernorm_forward / rmsnorm_forward of it
  // (same bits as add() followed by that op on the same backend). a, b, sum share inp's dtype rules;
  // sum may alias a or b, out aliases none of them.
  void add_layernorm_forward(const TensorView& sum, const TensorView& out, const TensorView& mean,
                             const TensorView& rstd, const TensorView& a, const TensorView& b,
                             const TensorView& weight, const TensorView& bias, float eps);
  void add_rmsnorm_forward(const TensorView& sum, const TensorView& out, const TensorView& rstd, const TensorView& a,
                           const TensorView& b, const TensorView& weight, float eps);

  // ---- activations ------------------------------------------------------------------------------
  // out[n] = act(inp[n]) (same shapes, any rank); gelu is the tanh approximation.
  // The four ops below take an output (out, dinp) of inp's dtype, or bf16 for an f32 inp: the f32
  // result rounded once, bit for bit what convert() of the f32 output gives. bf16 runs feed it straight
  // to a GEMM and skip the f32 round trip through memory (model/ffn_block.cpp).
  void activation_forward(Activation act, const TensorView& out, const TensorView& inp);
  // dinp = dout * act'(inp)  (overwrite)
  void activation_backward(Activation act, const TensorView& dinp, const TensorView& dout,
                           const TensorView& inp);
  // Gated linear unit (SwiGLU with kSilu, GeGLU with kGeluTanh) over a fused gate·up projection:
  // out[N,H] = act(inp[N, 0:H]) * inp[N, H:2H].
  void glu_forward(Activation act, const TensorView& out, const TensorView& inp);
  // dinp[N,2H] (overwrite) from dout[N,H].
  void glu_backward(Activation act, const TensorView& dinp, const TensorView& dout,
                    const TensorView& inp);

  // ---- rotary position embedding (Hugging Face rotate-half layout) ------------------------------
  // x[N,NH,HD]: on the first rotary_dim = freqs.rotary_dim() dims of each head (even, <= HD), pairs
  // (i, i + rotary_dim/2) are rotated by angle pos · freqs.inv_freq[i] and scaled by
  // freqs.attention_scaling; the remaining dims pass through unscaled.
  // positions[N] i32, each >= 0 (a negative position stops the cpu backend). out may alias inp.
  void rope_forward(const TensorView& out, const TensorView& inp, const TensorView& positions,
                    const RopeFreqs& freqs);
  // The transpose (inverse rotation, same scaling) applied to gradients. dinp may alias dout.
  void rope_backward(const TensorView& dinp, const TensorView& dout, const TensorView& positions,
                     const RopeFreqs& freqs);

  // ---- causal self-attention with grouped-query heads -------------------------------------------
  // q[B,T,NH,HD], k[B,T,G,HD], v[B,T,G,HD]; query head h reads kv head h / (NH/G).
  // out[B,T,NH,HD] = softmax(scale · q·kᵀ + mask) · v; lse[B,NH,T] (f32) saves the log-sum-exp of
  // each row for backward. mask: key j is visible to query i iff j <= i and, when doc_ids[B,T] (i32,
  // optional) is given, doc_ids[b,j] == doc_ids[b,i] (packed documents, each a contiguous run).
  // kNaive materialises the T×T scores (for checking); kFlash tiles with an online softmax and
  // never holds more than a tile of scores.
  // compute (kF32 or kBF16; the tensors stay f32): kF32 computes in f32. kBF16 lets a backend round
  // q, k, v, dout and the probabilities to bf16 for its matrix units, with f32 accumulation and f32
  // softmax statistics (the model passes its compute dtype). ref computes in f32 either way; cpu
  // uses AVX512-BF16 dot products where the build has them (kernels/cpu/attention_bf16_tiles.h, kFlash
  // only); cuda uses bf16 tensor cores for head dims up to 128 (kernels/cuda/attention_fa2.cu).
  void attention_forward(AttentionBackend backend, const TensorView& out, const TensorView& lse,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& doc_ids, float scale, DType compute = DType::kF32);
  // dq, dk, dv (overwrite) from dout, given the forward's inputs, out and lse.
  void attention_backward(AttentionBackend backend, const TensorView& dq, const TensorView& dk,
                          const TensorView& dv, const TensorView& dout, const TensorView& q,
                          const TensorView& k, const TensorView& v, const TensorView& out,
                          const TensorView& lse, const TensorView& doc_ids, float scale,
                          DType compute = DType::kF32);

  // ---- attention of new queries over a KV cache (incremental decoding) --------------------------
  // One query position per batch row attends over the cached keys [0, length) of its row (the
  // query's own key already appended): out[B,NH,HD] = softmax(scale · q·kᵀ) · v with q[B,NH,HD],
  // k_cache[B,S,G,HD], v_cache[B,S,G,HD] (S: cache capacity, 1 <= length <= S); query head h reads kv
  // head h / (NH/G). Forward only (generation needs no gradients).
  void attention_decode(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                        const TensorView& v_cache, int64_t length, float scale);
  // n new query positions of one sequence at [start, start + n) over its KV cache (prefill, and a
  // choice segment after a shared prefix in eval): q[n,NH,HD], k_cache, v_cache [1,S,G,HD] with the
  // new tokens' keys and values already in rows [start, start + n) (start >= 0, n >= 1,
  // start + n <= S); query i attends causally over cache rows [0, start + i]:
  // out[n,NH,HD] = softmax(scale · q_i·kᵀ) · v. For n = 1 it is attention_decode of one row with
  // length start + 1. One call replaces n attention_decode calls. Forward only.
  void attention_prefill(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                         const TensorView& v_cache, int64_t start, float scale);

  // ---- LM head fused with softmax cross-entropy -------------------------------------------------
  // logits[n, 0:V] = x[N,C] · weight[Vp,C]ᵀ restricted to rows < V, computed chunk_rows at a time
  // so the N×V logits never exist at once. losses[N] (f32, written) = logsumexp - logit[target]
  // (+ z_loss·logsumexp²), 0 where target == ignore_index. Targets must be in [0, V) otherwise.
  // If dx[N,C] (f32, overwrite) and/or dweight[Vp,C] (f32, += or with opts.dweight_write = kOverwrite
  // =) are given, the gradients of grad_scale · Σ losses are computed in the same pass (no second
  // logits pass). The padding rows [V, Vp) of dweight have a zero gradient: a backend leaves them as
  // they are, or adds or writes that zero (cuda's GEMMs run over them).
  void lm_head_cross_entropy(const TensorView& losses, const TensorView& x, const TensorView& weight,
                             const TensorView& targets, const CrossEntropyOptions& opts,
                             const TensorView& dx, const TensorView& dweight);

  // ---- elementwise and reductions over flat spans -----------------------------------------------
  // out = a + b (same shape; out may alias a or b).
  void add(const TensorView& out, const TensorView& a, const TensorView& b);
  // out = inp converted to out's dtype (f32 <-> bf16 with round-to-nearest-even; same numel).
  void convert(const TensorView& out, const TensorView& inp);
  // Σ x² in f64 accumulation (global-norm clipping sums this over spans, then takes the root).
  double sum_squares(const TensorView& x);
  // x *= s in place.
  void scale(const TensorView& x, float s);
  // out = alpha·x + beta·y (f32, or f64 on ref; one numel; out may alias x or y): scale, scale and
  // add in one pass (a backend may fuse a multiply-add, so the last bit may differ from those three
  // ops; a given backend is deterministic). out_bf16 (optional, bf16, same numel) receives out
  // rounded to nearest even in the same pass.
  void axpby(const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
             const TensorView& out_bf16);
  // AdamW over a flat span: param, grad, m, v f32[n]; param_bf16[n] optional, refreshed from the new
  // param in the same pass. m, v updated in place.
  void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m,
                    const TensorView& v, const TensorView& param_bf16, const AdamWParams& p);

  // ---- mixture of experts (kernels/moe.cpp; index bookkeeping in kernels/moe_routing.h) -----------
  // Letters: E experts, K experts per token (top-k), R routed rows (<= N·K; rows grouped by expert),
  // F a row width (C, or an expert's hidden width).
  // Router: probs[N,E] = softmax(logits[N,E]), lse[N] its log-sum-exp; experts[N,K] (i32) the K
  // largest of probs + bias[E] (bias optional, f32: selection only, DeepSeek-V3's balancing bias),
  // in descending order, ties to the lower expert index; weights[N,K] = the unbiased probs of
  // those experts, divided by their sum when renormalize. logits/probs/lse/weights share f32|f64.
  void moe_router_forward(const TensorView& weights, const TensorView& experts, const TensorView& probs,
                          const TensorView& lse, const TensorView& logits, const TensorView& bias,
                          bool renormalize);
  // dlogits[N,E] (overwrite) from dweights[N,K] plus two optional extra terms of the objective:
  // dprobs[E] (optional, f32|f64 as probs) is added to d probs[n,e] for every row n (the aux loss
  // coef·E·Σ f_e·mean_n(p_ne) has d/dp_ne = coef·E·f_e/N), and z_scale·lse[n] to d lse[n] (the router
  // z-loss coef·mean(lse²) has z_scale = 2·coef/N).
  void moe_router_backward(const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                           const TensorView& lse, const TensorView& experts, bool renormalize,
                           const TensorView& dprobs, double z_scale);
  // out[R,F] = inp[rows[r], :] (rows[R] i32 in [0, N); out and inp share any float dtype): the
  // permutation of token rows into expert order.
  void moe_gather_rows(const TensorView& out, const TensorView& inp, const TensorView& rows);
  // dinp[N,F] += dout[r, :] at rows[r] (f32|f64): the gather's backward (un-permutation).
  void moe_scatter_add_rows(const TensorView& dinp, const TensorView& dout, const TensorView& rows);
  // out[N,F] (overwrite) = Σ_k weights[n,k] · y[slots[n,k], :], slots[N,K] i32: a row of y, or -1
  // for a dropped slot (contributes 0). y, out, weights: f32|f64.
  void moe_combine_forward(const TensorView& out, const TensorView& y, const TensorView& weights,
                           const TensorView& slots);
  // dy[R,F] (overwrite; rows no slot names are left as they are) = weights[n,k] · dout[n] at row
  // slots[n,k]; dweights[N,K] (overwrite) = dout[n] · y[slots[n,k]] (0 for a dropped slot). Each row
  // of y is named by one slot at most (a routing's slots are), so backends may write dy in parallel.
  void moe_combine_backward(const TensorView& dy, const TensorView& dweights, const TensorView& dout,
                            const TensorView& y, const TensorView& weights, const TensorView& slots);
  // Grouped GEMM over experts with variable row counts (dropless: no padding): rows
  // [offsets[e], offsets[e+1]) of inp and out belong to expert e; offsets[E+1] (host, 0 = offsets[0]
  // <= ... <= offsets[E] <= rows of inp). out[r,OC] (f32) = inp[r,C] · weight[e,OC,C]ᵀ for those rows;
  // rows >= offsets[E] are untouched. inp and weight share a dtype (f32, bf16 or f64).
  void grouped_linear_forward(const TensorView& out, const TensorView& inp, const TensorView& weight,
                              const std::vector<int64_t>& offsets);
  // dinp[r,C] (overwrite, optional) = dout[r] · weight[e]; dweight[E,OC,C] (f32, +=, optional)
  // += dout[rows of e]ᵀ · inp[rows of e]. dout, inp and weight share a dtype.
  void grouped_linear_backward(const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                               const TensorView& inp, const TensorView& weight,
                               const std::vector<int64_t>& offsets);

  // ---- memory: fills, copies and the small reductions of a step ----------------------------------
  // These keep host loops out of model code, so a device backend runs them where the memory is.
  // x[n] = value converted to x's dtype (f32, f64, bf16 or i32; an i32 value must be integral).
  // fill(x, 0) writes +0.0 bits, exactly what a memset to zero writes.
  void fill(const TensorView& x, double value);
  // out = inp, byte for byte: same dtype and numel (shapes may differ). The explicit copy op; copies
  // between devices go through the backend that can reach both (host to host on any backend). out
  // and inp must not overlap.
  void copy(const TensorView& out, const TensorView& inp);
  // copy() without waiting for the device: it may return before the data has moved. A host
  // destination holds the data once a fence() taken after this call has been waited for (give it
  // staging_allocator() memory, or the copy waits for the device after all); a host source may be
  // changed as soon as the call returns (small ones are staged in page-locked memory, large ones
  // copied before returning). Ordered with the backend's ops as copy() is: ops issued before it
  // have written what it reads, ops issued after it see what it wrote. Host backends copy at once,
  // and so do all backends between two host views (wait for a fence before copying out of a host
  // buffer a queued copy is still filling).
  void copy_async(const TensorView& out, const TensorView& inp);
  // A copy out that the ops issued after it overlap (checkpoint snapshots of parameters and
  // optimizer state, GBs that would otherwise hold the device for their length): it reads `inp` once
  // the ops issued before it have written it, on a queue of its own (a copy stream on a GPU), while
  // the ops issued after it run. So no op may write `inp` until join_snapshots() has been issued:
  // the ops issued after that wait for every snapshot before it (on the device; the host does not
  // wait). A host destination holds the data once a fence() taken after this call has been waited
  // for, and that fence may need join_snapshots() to be issued first: issue it before blocking on
  // whoever waits for the fence. Between two host views, and on host backends, it copies at once.
  void snapshot_async(const TensorView& out, const TensorView& inp);
  void join_snapshots() { join_snapshots_impl(); }
  // out[N] i32: positions of the tokens of N = rows·T. With `given` absent, out[n] = n % T (the
  // position within the row); with `given` [N] i32 (e.g. positions restarting at each document),
  // a copy of it, each value checked to be in [0, T).
  void positions(const TensorView& out, const TensorView& given, int64_t T);
  // Number of targets[N] (i32) not equal to ignore_index.
  int64_t count_valid_targets(const TensorView& targets, int32_t ignore_index);
  // Σ x[n] (f32 or f64) accumulated in f64 in index order (deterministic; the model's loss sum).
  double sum(const TensorView& x);

 protected:
  // Implementations receive validated arguments.
  virtual void matmul_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                           bool trans_a, bool trans_b, bool accumulate) = 0;
  virtual void linear_forward_impl(const TensorView& out, const TensorView& inp,
                                   const TensorView& weight, const TensorView& bias) = 0;
  virtual void linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                    const TensorView& dbias, const TensorView& dout,
                                    const TensorView& inp, const TensorView& weight) = 0;
  // dweight = doutᵀ · inp written over dweight (linear_backward with GradWrite::kOverwrite). The
  // default fills dweight with zeros, then adds the product through linear_backward_impl; a backend
  // whose GEMM can write its output directly overrides it and skips both the fill and the read.
  virtual void linear_weight_grad_overwrite_impl(const TensorView& dweight, const TensorView& dout,
                                                 const TensorView& inp, const TensorView& weight);
  virtual void embedding_forward_impl(const TensorView& out, const TensorView& ids,
                                      const TensorView& table, bool accumulate) = 0;
  virtual void embedding_backward_impl(const TensorView& dtable, const TensorView& dout,
                                       const TensorView& ids) = 0;
  virtual void layernorm_forward_impl(const TensorView& out, const TensorView& mean,
                                      const TensorView& rstd, const TensorView& inp,
                                      const TensorView& weight, const TensorView& bias,
                                      float eps) = 0;
  virtual void layernorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                       const TensorView& dbias, const TensorView& dout,
                                       const TensorView& inp, const TensorView& weight,
                                       const TensorView& mean, const TensorView& rstd,
                                       bool accumulate) = 0;
  virtual void rmsnorm_forward_impl(const TensorView& out, const TensorView& rstd,
                                    const TensorView& inp, const TensorView& weight, float eps) = 0;
  virtual void rmsnorm_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                     const TensorView& dout, const TensorView& inp,
                                     const TensorView& weight, const TensorView& rstd,
                                     bool accumulate) = 0;
  // Default: add_impl, then the norm's impl over sum. Backends with a fused kernel override them.
  virtual void add_layernorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& mean,
                                          const TensorView& rstd, const TensorView& a, const TensorView& b,
                                          const TensorView& weight, const TensorView& bias, float eps);
  virtual void add_rmsnorm_forward_impl(const TensorView& sum, const TensorView& out, const TensorView& rstd,
                                        const TensorView& a, const TensorView& b, const TensorView& weight,
                                        float eps);
  virtual void activation_forward_impl(Activation act, const TensorView& out,
                                       const TensorView& inp) = 0;
  virtual void activation_backward_impl(Activation act, const TensorView& dinp,
                                        const TensorView& dout, const TensorView& inp) = 0;
  virtual void glu_forward_impl(Activation act, const TensorView& out, const TensorView& inp) = 0;
  virtual void glu_backward_impl(Activation act, const TensorView& dinp, const TensorView& dout,
                                 const TensorView& inp) = 0;
  virtual void rope_impl(const TensorView& out, const TensorView& inp, const TensorView& positions,
                         const RopeFreqs& freqs, bool inverse) = 0;
  virtual void attention_forward_impl(AttentionBackend backend, const TensorView& out,
                                      const TensorView& lse, const TensorView& q,
                                      const TensorView& k, const TensorView& v,
                                      const TensorView& doc_ids, float scale, DType compute) = 0;
  virtual void attention_backward_impl(AttentionBackend backend, const TensorView& dq,
                                       const TensorView& dk, const TensorView& dv,
                                       const TensorView& dout, const TensorView& q,
                                       const TensorView& k, const TensorView& v,
                                       const TensorView& out, const TensorView& lse,
                                       const TensorView& doc_ids, float scale, DType compute) = 0;
  virtual void attention_decode_impl(const TensorView& out, const TensorView& q,
                                     const TensorView& k_cache, const TensorView& v_cache,
                                     int64_t length, float scale) = 0;
  virtual void attention_prefill_impl(const TensorView& out, const TensorView& q,
                                      const TensorView& k_cache, const TensorView& v_cache,
                                      int64_t start, float scale) = 0;
  // Whether lm_head_cross_entropy_impl honours CrossEntropyOptions::dweight_write; if not (the
  // default), lm_head_cross_entropy zeroes dweight's rows [0, V) first and asks it to accumulate.
  virtual bool lm_head_writes_dweight_over() const { return false; }
  virtual void lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x,
                                          const TensorView& weight, const TensorView& targets,
                                          const CrossEntropyOptions& opts, const TensorView& dx,
                                          const TensorView& dweight) = 0;
  virtual void add_impl(const TensorView& out, const TensorView& a, const TensorView& b) = 0;
  virtual void convert_impl(const TensorView& out, const TensorView& inp) = 0;
  virtual double sum_squares_impl(const TensorView& x) = 0;
  virtual void scale_impl(const TensorView& x, float s) = 0;
  // Defaults: a loop over matmul_impl (the whole product for the symmetric one), and a plain host
  // loop (backends over host memory only).
  virtual void matmul_batched_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                                   bool trans_a, bool trans_b, bool accumulate);
  virtual void matmul_batched_symmetric_impl(const TensorView& c, const TensorView& a, const TensorView& b,
                                             bool trans_a, bool trans_b) {
    matmul_batched_impl(c, a, b, trans_a, trans_b, false);
  }
  virtual void axpby_impl(const TensorView& out, float alpha, const TensorView& x, float beta,
                          const TensorView& y, const TensorView& out_bf16);
  virtual void adamw_update_impl(const TensorView& param, const TensorView& grad,
                                 const TensorView& m, const TensorView& v,
                                 const TensorView& param_bf16, const AdamWParams& p) = 0;
  // MoE defaults (kernels/moe.cpp): host loops with f64 accumulation for the router, the row
  // permutation and the combine; the grouped GEMM loops over the experts calling this backend's own
  // linear_forward_impl/linear_backward_impl on each non-empty row range.
  virtual void moe_router_forward_impl(const TensorView& weights, const TensorView& experts,
                                       const TensorView& probs, const TensorView& lse,
                                       const TensorView& logits, const TensorView& bias, bool renormalize);
  virtual void moe_router_backward_impl(const TensorView& dlogits, const TensorView& dweights,
                                        const TensorView& probs, const TensorView& lse,
                                        const TensorView& experts, bool renormalize,
                                        const TensorView& dprobs, double z_scale);
  virtual void moe_gather_rows_impl(const TensorView& out, const TensorView& inp, const TensorView& rows);
  virtual void moe_scatter_add_rows_impl(const TensorView& dinp, const TensorView& dout, const TensorView& rows);
  virtual void moe_combine_forward_impl(const TensorView& out, const TensorView& y, const TensorView& weights,
                                        const TensorView& slots);
  virtual void moe_combine_backward_impl(const TensorView& dy, const TensorView& dweights,
                                         const TensorView& dout, const TensorView& y,
                                         const TensorView& weights, const TensorView& slots);
  virtual void grouped_linear_forward_impl(const TensorView& out, const TensorView& inp,
                                           const TensorView& weight, const std::vector<int64_t>& offsets);
  virtual void grouped_linear_backward_impl(const TensorView& dinp, const TensorView& dweight,
                                            const TensorView& dout, const TensorView& inp,
                                            const TensorView& weight, const std::vector<int64_t>& offsets);
  virtual void fill_impl(const TensorView& x, double value) = 0;
  virtual void copy_impl(const TensorView& out, const TensorView& inp) = 0;
  virtual void copy_async_impl(const TensorView& out, const TensorView& inp) { copy_impl(out, inp); }
  virtual void snapshot_async_impl(const TensorView& out, const TensorView& inp) { copy_async_impl(out, inp); }
  virtual void join_snapshots_impl() {}
  virtual void positions_impl(const TensorView& out, const TensorView& given, int64_t T) = 0;
  virtual int64_t count_valid_targets_impl(const TensorView& targets, int32_t ignore_index) = 0;
  virtual double sum_impl(const TensorView& x) = 0;

 private:
  bool copy_done_here(const char* op, const TensorView& out, const TensorView& inp);
};

// The instances live in the registry (kernels/registry.h): kernels::backend("cpu"), find_backend(name).

}  // namespace lmt::kernels
