// A pretend GPU for the host-side code of device runs, on any machine (tests only).
//
// PretendDeviceBackend runs the cpu backend's kernels over memory that it reports as
// Device::cuda(index) and that host code cannot touch: PretendDeviceMemory maps it with mmap and
// keeps it PROT_NONE except while the backend's own ops run, or while a DeviceAccess is alive (the
// pretend NCCL of a device communicator holds one around its calls). So trainer, optimizer, data
// parallelism or checkpoint code that reads or writes device memory directly, as a memcpy or a host
// loop, stops with SIGSEGV here, as it would on a GPU (where the same pointer is not host memory),
// and the tests that train on this backend find it without a GPU. Its copy kernel, like cuda's,
// moves data to, from or within its own memory: a copy between two host views reaching it is an
// error (Backend::copy does those on the host), and every other op refuses a tensor that is not in
// its memory (a GPU kernel handed a host pointer faults). A copy_async to the host lands only when
// a fence taken after it is waited for (until then the destination holds NaN bytes); a snapshot
// reads its source only at join_snapshots(), so one whose source is written before the join saves
// the new values.
//
// Not covered: timing and other asynchrony (every other op has finished when it returns), and host
// code that touches device memory while a DeviceAccess is open: the guard is process-wide, so while
// any thread runs an op, or a bucket's request is in flight, every thread may reach the memory. A
// queued copy whose host destination is freed before any fence delivers it is the caller's bug, as
// on a GPU, and is not caught.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmt/base/check.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/tensor/allocator.h"
#include "lmt/tensor/tensor.h"

namespace lmt::test {

// The pretend device's pages, process-wide and thread-safe.
class PretendDeviceMemory {
 public:
  static void* map(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu());
    const size_t len = round_up(bytes);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    LMT_CHECK(p != MAP_FAILED) << "pretend device: cannot map " << len << " bytes";
    blocks()[static_cast<const char*>(p)] = len;
    if (open_depth() == 0) protect(static_cast<const char*>(p), len, PROT_NONE);
    return p;
  }
  static void unmap(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu());
    blocks().erase(static_cast<const char*>(p));
    ::munmap(p, round_up(bytes));
  }
  // Whether p lies in a live block of the pretend device.
  static bool owns(const void* p) {
    std::lock_guard<std::mutex> lock(mu());
    auto it = blocks().upper_bound(static_cast<const char*>(p));
    if (it == blocks().begin()) return false;
    --it;
    return static_cast<const char*>(p) < it->first + it->second;
  }
  // Opens every block to host code (nested: the outermost close() closes them again).
  static void open() {
    std::lock_guard<std::mutex> lock(mu());
    if (open_depth()++ == 0)
      for (const auto& [p, len] : blocks()) protect(p, len, PROT_READ | PROT_WRITE);
  }
  static void close() {
    std::lock_guard<std::mutex> lock(mu());
    LMT_CHECK(open_depth() > 0) << "pretend device: close() without open()";
    if (--open_depth() == 0)
      for (const auto& [p, len] : blocks()) protect(p, len, PROT_NONE);
  }
  // Closes every block whatever the depth (host code called back from inside an op) until
  // resume(the result); opens inside that are balanced by their closes.
  static int suspend() {
    std::lock_guard<std::mutex> lock(mu());
    const int depth = std::exchange(open_depth(), 0);
    if (depth > 0)
      for (const auto& [p, len] : blocks()) protect(p, len, PROT_NONE);
    return depth;
  }
  static void resume(int depth) {
    std::lock_guard<std::mutex> lock(mu());
    LMT_CHECK(open_depth() == 0) << "pretend device: resume() inside an open()";
    open_depth() = depth;
    if (depth > 0)
      for (const auto& [p, len] : blocks()) protect(p, len, PROT_READ | PROT_WRITE);
  }

 private:
  static size_t round_up(size_t bytes) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    return (bytes == 0 ? 1 : bytes + page - 1) / page * page;
  }
  static void protect(const char* p, size_t len, int prot) {
    LMT_CHECK(::mprotect(const_cast<char*>(p), len, prot) == 0) << "pretend device: mprotect failed";
  }
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<const char*, size_t>& blocks() {
    static std::map<const char*, size_t> b;
    return b;
  }
  static int& open_depth() {
    static int d = 0;
    return d;
  }
};

// The pretend device's memory open to host code for this scope: its kernels, its communicator.
class DeviceAccess {
 public:
  DeviceAccess() { PretendDeviceMemory::open(); }
  ~DeviceAccess() { PretendDeviceMemory::close(); }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// The pretend device's memory closed to host code for this scope, however many scopes opened it:
// a callback a device op makes to host code (which must not read device memory directly).
class DeviceClosed {
 public:
  DeviceClosed() : depth_(PretendDeviceMemory::suspend()) {}
  ~DeviceClosed() { PretendDeviceMemory::resume(depth_); }
  DeviceClosed(const DeviceClosed&) = delete;
  DeviceClosed& operator=(const DeviceClosed&) = delete;

 private:
  int depth_;
};

class PretendDeviceAllocator final : public Allocator {
 public:
  explicit PretendDeviceAllocator(int index) : index_(index) {}
  Device device() const override { return Device::cuda(index_); }
  void* allocate(size_t bytes, size_t alignment) override {
    LMT_CHECK(alignment <= static_cast<size_t>(::sysconf(_SC_PAGESIZE))) << "pretend device: alignment " << alignment;
    return PretendDeviceMemory::map(bytes);
  }
  void deallocate(void* p, size_t bytes, size_t) override { PretendDeviceMemory::unmap(p, bytes); }
  void zero_fill(void* p, size_t bytes) override {
    const DeviceAccess open;
    host_allocator().zero_fill(p, bytes);
  }

 private:
  int index_;
};

// A device op's tensors must be device memory: a kernel of a GPU handed a host pointer faults or
// reads garbage. Every present view among an op's arguments must lie in the pretend device's blocks
// (other arguments pass).
struct OnDeviceArgs {
  const char* op;
  template <typename... A>
  void operator()(const A&... args) const {
    (check(args), ...);
  }
  template <typename A>
  void check(const A&) const {}
  void check(const TensorView& v) const {
    if (v.present() && v.numel() > 0)
      LMT_CHECK(PretendDeviceMemory::owns(v.data()))
          << "pretend device: " << op << " got " << v.to_string() << ", which is not device memory";
  }
};

// Ops of the backend running inside one of its ops on this thread (the cpu kernels call each other,
// e.g. the LM head's matmuls, with scratch of their own): only the outermost call is the interface.
struct OpDepth {
  static int& depth() {
    thread_local int d = 0;
    return d;
  }
  OpDepth() { ++depth(); }
  ~OpDepth() { --depth(); }
  OpDepth(const OpDepth&) = delete;
  OpDepth& operator=(const OpDepth&) = delete;
  bool outermost() const { return depth() == 1; }
};

// Every op of the cpu backend, its tensors checked to be device memory (at the interface, not in
// the cpu kernels' calls of each other) and that memory open while it runs.
#define LMT_PRETEND_DEVICE_OP(ret, name, params, args) \
  ret name params override {                           \
    const OpDepth nested;                              \
    if (nested.outermost()) OnDeviceArgs{#name} args;  \
    const DeviceAccess open;                           \
    return kernels::CpuBackend::name args;             \
  }

class PretendDeviceBackend : public kernels::CpuBackend {
 public:
  PretendDeviceBackend(std::string name, int index) : name_(std::move(name)), allocator_(index) {}
  std::string_view name() const override { return name_; }
  Device device() const override { return allocator_.device(); }
  Allocator& allocator() override { return allocator_; }
  // Delivers the queued copies to the host issued so far when waited for (those an earlier fence
  // covers too: a fence waits for every op before it).
  // A fence taken after snapshots waits, first, until join_snapshots() has read them.
  kernels::Fence fence() override {
    std::erase_if(queued_, [](const std::shared_ptr<QueuedCopy>& c) { return c->delivered.load(); });
    int64_t snapshots_before = 0;
    {
      std::lock_guard<std::mutex> lock(snapshot_mu_);
      snapshots_before = snapshots_issued_;
    }
    return kernels::Fence([this, due = queued_, snapshots_before] {
      {
        std::unique_lock<std::mutex> lock(snapshot_mu_);
        snapshot_joined_.wait(lock, [&] { return snapshots_read_ >= snapshots_before; });
      }
      for (const auto& c : due) c->deliver();
    });
  }
  void synchronize() override { fence().wait(); }

 protected:
  void copy_impl(const TensorView& out, const TensorView& inp) override {
    check_copy(out, inp);
    const DeviceAccess open;
    kernels::CpuBackend::copy_impl(out, inp);
  }
  // A queued copy to the host is read now (what a stream would read at this point) and lands in
  // `out` only when a later fence() is waited for; until then `out` holds NaN bytes, so a reader
  // that skipped the fence reads garbage, as it could on a GPU. Copies to the device land at once:
  // every later op sees them, as on a stream.
  void copy_async_impl(const TensorView& out, const TensorView& inp) override {
    check_copy(out, inp);
    if (!out.device().is_host()) return copy_impl(out, inp);
    auto c = std::make_shared<QueuedCopy>();
    c->to = out.data();
    {
      const DeviceAccess open;
      c->bytes.assign(static_cast<const char*>(inp.data()), static_cast<const char*>(inp.data()) + inp.bytes());
    }
    std::memset(out.data(), 0xff, out.bytes());  // NaN in f32 and bf16
    queued_.push_back(std::move(c));
  }
  // A snapshot reads its source only when join_snapshots() is issued, the latest a GPU's copy
  // stream may read it under the contract: code that writes a source before the join saves the
  // wrong values here (and a resumed run differs), where on a GPU it would race. Until then its
  // host destination holds NaN bytes.
  void snapshot_async_impl(const TensorView& out, const TensorView& inp) override {
    check_copy(out, inp);
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    if (out.device().is_host()) std::memset(out.data(), 0xff, out.bytes());
    snapshots_.push_back({out, inp});
    ++snapshots_issued_;
  }
  void join_snapshots_impl() override {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    if (snapshots_.empty()) return;
    {
      const DeviceAccess open;
      for (const auto& [out, inp] : snapshots_) std::memcpy(out.data(), inp.data(), inp.bytes());
    }
    snapshots_read_ += static_cast<int64_t>(snapshots_.size());
    snapshots_.clear();
    snapshot_joined_.notify_all();
  }
  LMT_PRETEND_DEVICE_OP(void, matmul_impl,
                        (const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a, bool trans_b,
                         bool accumulate),
                        (c, a, b, trans_a, trans_b, accumulate))
  LMT_PRETEND_DEVICE_OP(void, linear_forward_impl,
                        (const TensorView& out, const TensorView& inp, const TensorView& weight,
                         const TensorView& bias),
                        (out, inp, weight, bias))
  LMT_PRETEND_DEVICE_OP(void, linear_backward_impl,
                        (const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                         const TensorView& dout, const TensorView& inp, const TensorView& weight),
                        (dinp, dweight, dbias, dout, inp, weight))
  LMT_PRETEND_DEVICE_OP(void, linear_weight_grad_overwrite_impl,
                        (const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                         const TensorView& weight),
                        (dweight, dout, inp, weight))
  LMT_PRETEND_DEVICE_OP(void, embedding_forward_impl,
                        (const TensorView& out, const TensorView& ids, const TensorView& table, bool accumulate),
                        (out, ids, table, accumulate))
  LMT_PRETEND_DEVICE_OP(void, embedding_backward_impl,
                        (const TensorView& dtable, const TensorView& dout, const TensorView& ids), (dtable, dout, ids))
  LMT_PRETEND_DEVICE_OP(void, layernorm_forward_impl,
                        (const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                         const TensorView& weight, const TensorView& bias, float eps),
                        (out, mean, rstd, inp, weight, bias, eps))
  LMT_PRETEND_DEVICE_OP(void, layernorm_backward_impl,
                        (const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                         const TensorView& dout, const TensorView& inp, const TensorView& weight,
                         const TensorView& mean, const TensorView& rstd, bool accumulate),
                        (dinp, dweight, dbias, dout, inp, weight, mean, rstd, accumulate))
  LMT_PRETEND_DEVICE_OP(void, rmsnorm_forward_impl,
                        (const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                         float eps),
                        (out, rstd, inp, weight, eps))
  LMT_PRETEND_DEVICE_OP(void, rmsnorm_backward_impl,
                        (const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                         const TensorView& inp, const TensorView& weight, const TensorView& rstd, bool accumulate),
                        (dinp, dweight, dout, inp, weight, rstd, accumulate))
  LMT_PRETEND_DEVICE_OP(void, add_layernorm_forward_impl,
                        (const TensorView& sum, const TensorView& out, const TensorView& mean, const TensorView& rstd,
                         const TensorView& a, const TensorView& b, const TensorView& weight, const TensorView& bias,
                         float eps),
                        (sum, out, mean, rstd, a, b, weight, bias, eps))
  LMT_PRETEND_DEVICE_OP(void, add_rmsnorm_forward_impl,
                        (const TensorView& sum, const TensorView& out, const TensorView& rstd, const TensorView& a,
                         const TensorView& b, const TensorView& weight, float eps),
                        (sum, out, rstd, a, b, weight, eps))
  LMT_PRETEND_DEVICE_OP(void, activation_forward_impl,
                        (kernels::Activation act, const TensorView& out, const TensorView& inp), (act, out, inp))
  LMT_PRETEND_DEVICE_OP(void, activation_backward_impl,
                        (kernels::Activation act, const TensorView& dinp, const TensorView& dout,
                         const TensorView& inp),
                        (act, dinp, dout, inp))
  LMT_PRETEND_DEVICE_OP(void, glu_forward_impl, (kernels::Activation act, const TensorView& out, const TensorView& inp),
                        (act, out, inp))
  LMT_PRETEND_DEVICE_OP(void, glu_backward_impl,
                        (kernels::Activation act, const TensorView& dinp, const TensorView& dout,
                         const TensorView& inp),
                        (act, dinp, dout, inp))
  LMT_PRETEND_DEVICE_OP(void, rope_impl,
                        (const TensorView& out, const TensorView& inp, const TensorView& positions,
                         const kernels::RopeFreqs& freqs, bool inverse),
                        (out, inp, positions, freqs, inverse))
  LMT_PRETEND_DEVICE_OP(void, attention_forward_impl,
                        (kernels::AttentionBackend backend, const TensorView& out, const TensorView& lse,
                         const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& doc_ids,
                         float scale, DType compute),
                        (backend, out, lse, q, k, v, doc_ids, scale, compute))
  LMT_PRETEND_DEVICE_OP(void, attention_backward_impl,
                        (kernels::AttentionBackend backend, const TensorView& dq, const TensorView& dk,
                         const TensorView& dv, const TensorView& dout, const TensorView& q, const TensorView& k,
                         const TensorView& v, const TensorView& out, const TensorView& lse, const TensorView& doc_ids,
                         float scale, DType compute),
                        (backend, dq, dk, dv, dout, q, k, v, out, lse, doc_ids, scale, compute))
  LMT_PRETEND_DEVICE_OP(void, attention_decode_impl,
                        (const TensorView& out, const TensorView& q, const TensorView& k_cache,
                         const TensorView& v_cache, int64_t length, float scale),
                        (out, q, k_cache, v_cache, length, scale))
  LMT_PRETEND_DEVICE_OP(void, attention_prefill_impl,
                        (const TensorView& out, const TensorView& q, const TensorView& k_cache,
                         const TensorView& v_cache, int64_t start, float scale),
                        (out, q, k_cache, v_cache, start, scale))
  // The vocabulary-parallel combine gets its row statistics in device memory, as from cuda's kernel
  // (kernels/cuda/loss.cu): the cpu kernel's host ones are copied into device buffers for the
  // caller's combine, which runs with the device memory closed (host code that reads them directly
  // faults; the backend's copy reaches them), and copied back.
  void lm_head_cross_entropy_impl(const TensorView& losses, const TensorView& x, const TensorView& weight,
                                  const TensorView& targets, const kernels::CrossEntropyOptions& opts,
                                  const TensorView& dx, const TensorView& dweight) override {
    const OpDepth nested;
    if (nested.outermost()) OnDeviceArgs{"lm_head_cross_entropy_impl"}(losses, x, weight, targets, dx, dweight);
    const DeviceAccess open;
    kernels::CrossEntropyOptions o = opts;
    if (opts.combine) {
      o.combine = [this, &opts](int64_t row0, const TensorView& lse, const TensorView& target_logit) {
        const int64_t rows = lse.numel();
        // Per call: a buffer kept by the backend would outlive the memory's bookkeeping at exit.
        const Tensor stats({2 * rows}, DType::kF32, allocator_);
        const TensorView dl = stats.view().slice_rows(0, rows), dt = stats.view().slice_rows(rows, 2 * rows);
        std::memcpy(dl.data(), lse.data(), lse.bytes());
        std::memcpy(dt.data(), target_logit.data(), target_logit.bytes());
        {
          const DeviceClosed closed;
          opts.combine(row0, dl, dt);
        }
        std::memcpy(lse.data(), dl.data(), lse.bytes());
        std::memcpy(target_logit.data(), dt.data(), target_logit.bytes());
      };
    }
    kernels::CpuBackend::lm_head_cross_entropy_impl(losses, x, weight, targets, o, dx, dweight);
  }
  LMT_PRETEND_DEVICE_OP(void, add_impl, (const TensorView& out, const TensorView& a, const TensorView& b), (out, a, b))
  LMT_PRETEND_DEVICE_OP(void, convert_impl, (const TensorView& out, const TensorView& inp), (out, inp))
  LMT_PRETEND_DEVICE_OP(double, sum_squares_impl, (const TensorView& x), (x))
  LMT_PRETEND_DEVICE_OP(void, scale_impl, (const TensorView& x, float s), (x, s))
  LMT_PRETEND_DEVICE_OP(void, matmul_batched_impl,
                        (const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a, bool trans_b,
                         bool accumulate),
                        (c, a, b, trans_a, trans_b, accumulate))
  LMT_PRETEND_DEVICE_OP(void, matmul_batched_symmetric_impl,
                        (const TensorView& c, const TensorView& a, const TensorView& b, bool trans_a, bool trans_b),
                        (c, a, b, trans_a, trans_b))
  LMT_PRETEND_DEVICE_OP(void, axpby_impl,
                        (const TensorView& out, float alpha, const TensorView& x, float beta, const TensorView& y,
                         const TensorView& out_bf16),
                        (out, alpha, x, beta, y, out_bf16))
  LMT_PRETEND_DEVICE_OP(void, adamw_update_impl,
                        (const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                         const TensorView& param_bf16, const kernels::AdamWParams& p),
                        (param, grad, m, v, param_bf16, p))
  LMT_PRETEND_DEVICE_OP(void, moe_router_forward_impl,
                        (const TensorView& weights, const TensorView& experts, const TensorView& probs,
                         const TensorView& lse, const TensorView& logits, const TensorView& bias, bool renormalize),
                        (weights, experts, probs, lse, logits, bias, renormalize))
  LMT_PRETEND_DEVICE_OP(void, moe_router_backward_impl,
                        (const TensorView& dlogits, const TensorView& dweights, const TensorView& probs,
                         const TensorView& lse, const TensorView& experts, bool renormalize, const TensorView& dprobs,
                         double z_scale),
                        (dlogits, dweights, probs, lse, experts, renormalize, dprobs, z_scale))
  LMT_PRETEND_DEVICE_OP(void, moe_gather_rows_impl,
                        (const TensorView& out, const TensorView& inp, const TensorView& rows), (out, inp, rows))
  LMT_PRETEND_DEVICE_OP(void, moe_scatter_add_rows_impl,
                        (const TensorView& dinp, const TensorView& dout, const TensorView& rows), (dinp, dout, rows))
  LMT_PRETEND_DEVICE_OP(void, moe_combine_forward_impl,
                        (const TensorView& out, const TensorView& y, const TensorView& weights,
                         const TensorView& slots),
                        (out, y, weights, slots))
  LMT_PRETEND_DEVICE_OP(void, moe_combine_backward_impl,
                        (const TensorView& dy, const TensorView& dweights, const TensorView& dout, const TensorView& y,
                         const TensorView& weights, const TensorView& slots),
                        (dy, dweights, dout, y, weights, slots))
  LMT_PRETEND_DEVICE_OP(void, grouped_linear_forward_impl,
                        (const TensorView& out, const TensorView& inp, const TensorView& weight,
                         const std::vector<int64_t>& offsets),
                        (out, inp, weight, offsets))
  LMT_PRETEND_DEVICE_OP(void, grouped_linear_backward_impl,
                        (const TensorView& dinp, const TensorView& dweight, const TensorView& dout,
                         const TensorView& inp, const TensorView& weight, const std::vector<int64_t>& offsets),
                        (dinp, dweight, dout, inp, weight, offsets))
  LMT_PRETEND_DEVICE_OP(void, fill_impl, (const TensorView& x, double value), (x, value))
  LMT_PRETEND_DEVICE_OP(void, positions_impl, (const TensorView& out, const TensorView& given, int64_t T),
                        (out, given, T))
  LMT_PRETEND_DEVICE_OP(int64_t, count_valid_targets_impl, (const TensorView& targets, int32_t ignore_index),
                        (targets, ignore_index))
  LMT_PRETEND_DEVICE_OP(double, sum_impl, (const TensorView& x), (x))

 private:
  struct QueuedCopy {
    void* to = nullptr;
    std::vector<char> bytes;
    std::once_flag done;
    std::atomic<bool> delivered{false};
    void deliver() {
      std::call_once(done, [this] {
        std::memcpy(to, bytes.data(), bytes.size());
        delivered = true;
      });
    }
  };
  // As the cuda backend's: its copy kernel moves data to, from or within its own memory only.
  void check_copy(const TensorView& out, const TensorView& inp) const {
    LMT_CHECK(!(out.device().is_host() && inp.device().is_host())) << name_ << " copy between two host views";
  }

  std::string name_;
  PretendDeviceAllocator allocator_;
  std::vector<std::shared_ptr<QueuedCopy>> queued_;  // copies to the host not yet delivered
  // Snapshots issued and not yet joined (read); the counts since the start, for fences.
  std::mutex snapshot_mu_;
  std::condition_variable snapshot_joined_;
  std::vector<std::pair<TensorView, TensorView>> snapshots_;
  int64_t snapshots_issued_ = 0, snapshots_read_ = 0;
};

#undef LMT_PRETEND_DEVICE_OP

}  // namespace lmt::test
