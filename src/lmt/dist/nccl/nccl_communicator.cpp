#include "lmt/dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "lmt/base/log.h"
#include "lmt/dist/device_communicator.h"
#include "lmt/kernels/cuda/cuda_backend.h"
#include "lmt/kernels/registry.h"

namespace lmt::dist::nccl {
namespace {

constexpr const char* kHint =
    "check that every rank has its own GPU (nvidia-smi), run with NCCL_DEBUG=WARN for "
    "NCCL's reason, or run one process (docs/CUDA.md, On a cluster)";

bool on_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown pointer is host memory; clear the error it left
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Where a call's buffers live: 1 device, 0 host, -1 mixed (null pointers, empty parts, ignored).
int where(std::initializer_list<const void*> buffers) {
  int device = -2;
  for (const void* p : buffers) {
    if (p == nullptr) continue;
    const int d = on_device(p) ? 1 : 0;
    if (device == -2)
      device = d;
    else if (device != d)
      return -1;
  }
  return device == -2 ? 0 : device;
}

}  // namespace

// A queued NCCL call: done is recorded on the NCCL stream after it.
class NcclRequest final : public Request {
 public:
  NcclRequest(NcclCommunicator& owner, cudaEvent_t done, Status launched)
      : owner_(owner), done_(done), status_(std::move(launched)) {}
  ~NcclRequest() override { (void)wait(); }
  Status wait() override {
    if (done_ == nullptr) return status_;
    const cudaError_t e = cudaStreamWaitEvent(owner_.compute_, done_, 0);
    cudaEventDestroy(done_);
    done_ = nullptr;
    if (status_.ok() && e != cudaSuccess) status_ = owner_.error("cudaStreamWaitEvent", cudaGetErrorString(e));
    if (status_.ok()) status_ = owner_.async_error();
    if (!status_.ok()) owner_.failed_ = true;
    return status_;
  }
  bool test() override { return done_ == nullptr || cudaEventQuery(done_) != cudaErrorNotReady; }

 private:
  NcclCommunicator& owner_;
  cudaEvent_t done_;
  Status status_;
};

Status NcclCommunicator::error(const char* what, const std::string& detail) const {
  return Internal("rank " + std::to_string(rank()) + "/" + std::to_string(world()) + ": " + what + ": " + detail,
                  kHint);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Communicator* host,
                                                                     std::unique_ptr<Communicator> owned, int device,
                                                                     cudaStream_t compute) {
  LMT_ASSIGN_OR_RETURN(const Library* lib, library());
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(*lib, host, std::move(owned), device, compute));
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return c->error("cudaSetDevice", cudaGetErrorString(e));
  return c;
}

Status NcclCommunicator::start() {
  if (comm_ != nullptr) return Status::Ok();
  if (!start_error_.ok()) return start_error_;
  // Collective over host_: rank 0 makes the id and broadcasts it with whether that worked, so on a
  // failure every rank returns the error instead of waiting in ncclCommInitRank.
  struct {
    int32_t ok = 1;
    ncclUniqueId id{};
  } boot;
  ncclResult_t r = ncclSuccess;
  if (host_->rank() == 0) {
    r = nccl_.get_unique_id(&boot.id);
    boot.ok = r == ncclSuccess;
  }
  start_error_ = host_->broadcast(&boot, sizeof boot, 0);
  if (start_error_.ok() && !boot.ok)
    start_error_ = error("ncclGetUniqueId", host_->rank() == 0 ? nccl_.get_error_string(r) : "failed on rank 0");
  cudaError_t e = cudaSuccess;
  if (start_error_.ok() && (e = cudaSetDevice(device_)) != cudaSuccess)
    start_error_ = error("cudaSetDevice", cudaGetErrorString(e));
  if (start_error_.ok() && (r = nccl_.comm_init_rank(&comm_, host_->world(), boot.id, host_->rank())) != ncclSuccess) {
    comm_ = nullptr;
    start_error_ = error("ncclCommInitRank", nccl_.get_error_string(r));
  }
  if (start_error_.ok() && (e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) != cudaSuccess)
    start_error_ = error("cudaStreamCreateWithFlags", cudaGetErrorString(e));
  if (!start_error_.ok()) {
    failed_ = true;
    return start_error_;
  }
  if (host_->rank() == 0) {
    LMT_LOG(INFO) << "NCCL " << version_string(nccl_.version) << ": a communicator of " << host_->world() << " ranks";
  }
  started_.store(comm_);
  return Status::Ok();
}

Status NcclCommunicator::async_error() const {
  ncclComm_t c = started_.load();
  if (c == nullptr) return Status::Ok();
  ncclResult_t found = ncclSuccess;
  if (nccl_.comm_get_async_error(c, &found) != ncclSuccess) return Status::Ok();  // could not ask: no news
  if (found == ncclSuccess || found == ncclInProgress) return Status::Ok();
  return error("NCCL found an error in the background (ncclCommGetAsyncError)", nccl_.get_error_string(found));
}

NcclCommunicator::~NcclCommunicator() {
  started_.store(nullptr);
  // After an error the peers may never finish what is queued: abort rather than wait for it.
  if (comm_ != nullptr) (failed_ ? nccl_.comm_abort : nccl_.comm_destroy)(comm_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

template <typename Enqueue>
std::unique_ptr<Request> NcclCommunicator::launch(const char* what, Enqueue&& enqueue) {
  if (Status st = start(); !st.ok()) return completed_request(st);
  cudaEvent_t ready = nullptr, done = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ready, compute_);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, ready, 0);
  if (ready != nullptr) cudaEventDestroy(ready);  // released once its recorded work completes
  if (e != cudaSuccess) {
    if (done != nullptr) cudaEventDestroy(done);
    failed_ = true;
    return completed_request(error(what, cudaGetErrorString(e)));
  }
  const ncclResult_t r = enqueue(stream_);
  Status st = r == ncclSuccess ? Status::Ok() : error(what, nccl_.get_error_string(r));
  e = cudaEventRecord(done, stream_);
  if (st.ok() && e != cudaSuccess) st = error("cudaEventRecord", cudaGetErrorString(e));
  if (!st.ok()) failed_ = true;
  return std::make_unique<NcclRequest>(*this, done, std::move(st));
}

std::unique_ptr<Request> NcclCommunicator::all_reduce_sum_async(float* data, int64_t n) {
  if (n <= 0 || where({data}) == 0) return host_->all_reduce_sum_async(data, n);
  return launch("ncclAllReduce", [&](cudaStream_t s) {
    return nccl_.all_reduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, s);
  });
}

Status NcclCommunicator::all_reduce_sum(float* data, int64_t n) { return all_reduce_sum_async(data, n)->wait(); }

Status NcclCommunicator::all_reduce_sum(double* data, int64_t n) {
  if (n <= 0 || where({data}) == 0) return host_->all_reduce_sum(data, n);
  return launch("ncclAllReduce",
                [&](cudaStream_t s) {
                  return nccl_.all_reduce(data, data, static_cast<size_t>(n), ncclFloat64, ncclSum, comm_, s);
                })
      ->wait();
}

std::unique_ptr<Request> NcclCommunicator::reduce_scatter_sum_async(const float* send, float* recv,
                                                                    const std::vector<int64_t>& counts) {
  const int kind = where({send, recv});
  if (kind == 0) return host_->reduce_scatter_sum_async(send, recv, counts);
  if (Status st = check_counts(counts, world(), "reduce_scatter_sum"); !st.ok()) return completed_request(st);
  if (kind < 0)
    return completed_request(InvalidArgument("reduce_scatter_sum: send and recv in different memories",
                                             "pass two device buffers or two host buffers"));
  const std::vector<int64_t> off = offsets_of(counts);
  const bool equal = equal_parts(counts);
  return launch("ncclReduceScatter", [&](cudaStream_t s) {
    if (equal) return nccl_.reduce_scatter(send, recv, static_cast<size_t>(counts[0]), ncclFloat32, ncclSum, comm_, s);
    ncclResult_t r = nccl_.group_start();
    for (int p = 0; p < world() && r == ncclSuccess; ++p) {
      if (counts[p] == 0) continue;  // recv is only written on the root, so every rank may pass its own
      r = nccl_.reduce(send + off[p], recv, static_cast<size_t>(counts[p]), ncclFloat32, ncclSum, p, comm_, s);
    }
    const ncclResult_t end = nccl_.group_end();
    return r != ncclSuccess ? r : end;
  });
}

Status NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) {
  return reduce_scatter_sum_async(send, recv, counts)->wait();
}

std::unique_ptr<Request> NcclCommunicator::gather_parts(char* data, const std::vector<int64_t>& counts,
                                                        size_t elem_bytes, const char* what) {
  if (Status st = check_counts(counts, world(), what); !st.ok()) return completed_request(st);
  const std::vector<int64_t> off = offsets_of(counts);
  const bool equal = equal_parts(counts);
  return launch(what, [&](cudaStream_t s) {
    const size_t me = static_cast<size_t>(off[rank()]) * elem_bytes;
    if (equal)  // in place: NCCL's all-gather with sendbuff = recvbuff + rank · count
      return nccl_.all_gather(data + me, data, static_cast<size_t>(counts[0]) * elem_bytes, ncclInt8, comm_, s);
    ncclResult_t r = nccl_.group_start();
    for (int p = 0; p < world() && r == ncclSuccess; ++p) {
      if (counts[p] == 0) continue;
      char* part = data + static_cast<size_t>(off[p]) * elem_bytes;
      r = nccl_.broadcast(part, part, static_cast<size_t>(counts[p]) * elem_bytes, ncclInt8, p, comm_, s);
    }
    const ncclResult_t end = nccl_.group_end();
    return r != ncclSuccess ? r : end;
  });
}

std::unique_ptr<Request> NcclCommunicator::all_gather_async(float* data, const std::vector<int64_t>& counts) {
  if (where({data}) == 0) return host_->all_gather_async(data, counts);
  return gather_parts(reinterpret_cast<char*>(data), counts, sizeof(float), "all_gather");
}

std::unique_ptr<Request> NcclCommunicator::all_gather_async(uint16_t* data, const std::vector<int64_t>& counts) {
  if (where({data}) == 0) return host_->all_gather_async(data, counts);
  return gather_parts(reinterpret_cast<char*>(data), counts, sizeof(uint16_t), "all_gather");
}

Status NcclCommunicator::all_gather(float* data, const std::vector<int64_t>& counts) {
  return all_gather_async(data, counts)->wait();
}

Status NcclCommunicator::broadcast(void* data, int64_t bytes, int root) {
  if (bytes <= 0 || where({data}) == 0) return host_->broadcast(data, bytes, root);
  if (root < 0 || root >= world())
    return InvalidArgument("broadcast: root " + std::to_string(root) + " outside a world of " + std::to_string(world()),
                           "pass a rank of this communicator");
  return launch("ncclBroadcast",
                [&](cudaStream_t s) {
                  return nccl_.broadcast(data, data, static_cast<size_t>(bytes), ncclInt8, root, comm_, s);
                })
      ->wait();
}

Status NcclCommunicator::all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                      const std::vector<int64_t>& recv_bytes) {
  const int kind = where({send, recv});
  if (kind == 0) return host_->all_to_all_v(send, send_bytes, recv, recv_bytes);
  if (kind < 0)
    return InvalidArgument("all_to_all_v: one of send and recv is GPU memory and the other is not",
                           "pass two GPU buffers (or two host buffers)");
  LMT_RETURN_IF_ERROR(check_counts(send_bytes, world(), "all_to_all_v (send)"));
  LMT_RETURN_IF_ERROR(check_counts(recv_bytes, world(), "all_to_all_v (recv)"));
  const int me = rank();
  if (send_bytes[me] != recv_bytes[me])
    return InvalidArgument("all_to_all_v: rank " + std::to_string(me) + " sends itself " + std::to_string(send_bytes[me]) +
                               " bytes but expects " + std::to_string(recv_bytes[me]),
                           "recv_bytes[p] must equal what rank p sends here");
  const std::vector<int64_t> so = offsets_of(send_bytes), ro = offsets_of(recv_bytes);
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  // This rank's own part is a device copy; the others one grouped ncclSend/ncclRecv per peer (NCCL's
  // all-to-all pattern), all on the communication stream after the compute stream's work.
  return launch("all_to_all_v (ncclSend/ncclRecv)",
                [&](cudaStream_t s) {
                  if (send_bytes[me] > 0 &&
                      cudaMemcpyAsync(dst + ro[me], src + so[me], static_cast<size_t>(send_bytes[me]),
                                      cudaMemcpyDeviceToDevice, s) != cudaSuccess)
                    return ncclUnhandledCudaError;
                  ncclResult_t r = nccl_.group_start();
                  for (int p = 0; p < world() && r == ncclSuccess; ++p) {
                    if (p == me) continue;
                    if (send_bytes[p] > 0)
                      r = nccl_.send(src + so[p], static_cast<size_t>(send_bytes[p]), ncclInt8, p, comm_, s);
                    if (r == ncclSuccess && recv_bytes[p] > 0)
                      r = nccl_.recv(dst + ro[p], static_cast<size_t>(recv_bytes[p]), ncclInt8, p, comm_, s);
                  }
                  const ncclResult_t end = nccl_.group_end();
                  return r != ncclSuccess ? r : end;
                })
      ->wait();
}

bool NcclCommunicator::equal_parts(const std::vector<int64_t>& counts) const {
  if (rooted_parts_) return false;
  for (int64_t c : counts)
    if (c != counts[0]) return false;
  return true;
}

Status NcclCommunicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= world() || peer == rank())
    return InvalidArgument(std::string(what) + ": peer " + std::to_string(peer) + " is not another rank",
                           "pass another rank of this communicator");
  // start() is collective over every rank: beyond two, a first call between two of them would wait.
  if (comm_ == nullptr && world() > 2)
    return FailedPrecondition(std::string(what) + " on GPU memory before any collective on " + std::to_string(world()) +
                                  " ranks: the NCCL communicator starts with a collective",
                              "run a collective on GPU memory over every rank first");
  return Status::Ok();
}

std::unique_ptr<Request> NcclCommunicator::send_async(const void* data, int64_t bytes, int peer) {
  if (bytes <= 0 || where({data}) == 0) return host_->send_async(data, bytes, peer);
  if (Status st = check_peer(peer, "send"); !st.ok()) return completed_request(st);
  return launch("ncclSend",
                [&](cudaStream_t s) { return nccl_.send(data, static_cast<size_t>(bytes), ncclInt8, peer, comm_, s); });
}

std::unique_ptr<Request> NcclCommunicator::recv_async(void* data, int64_t bytes, int peer) {
  if (bytes <= 0 || where({data}) == 0) return host_->recv_async(data, bytes, peer);
  if (Status st = check_peer(peer, "recv"); !st.ok()) return completed_request(st);
  return launch("ncclRecv",
                [&](cudaStream_t s) { return nccl_.recv(data, static_cast<size_t>(bytes), ncclInt8, peer, comm_, s); });
}

Status NcclCommunicator::recv(void* data, int64_t bytes, int peer) { return recv_async(data, bytes, peer)->wait(); }

std::unique_ptr<Request> NcclCommunicator::send_recv_async(const void* send, int64_t send_bytes, int to, void* recv,
                                                           int64_t recv_bytes, int from) {
  const bool has_send = send != nullptr && send_bytes > 0, has_recv = recv != nullptr && recv_bytes > 0;
  const int kind = where({has_send ? send : nullptr, has_recv ? recv : nullptr});
  if (kind == 0) return Communicator::send_recv_async(send, send_bytes, to, recv, recv_bytes, from);
  if (kind < 0)
    return completed_request(InvalidArgument("send_recv_async: one buffer is GPU memory and the other is not",
                                             "pass two GPU buffers (or two host buffers)"));
  if (has_send)
    if (Status st = check_peer(to, "send"); !st.ok()) return completed_request(st);
  if (has_recv)
    if (Status st = check_peer(from, "recv"); !st.ok()) return completed_request(st);
  // One group: each neighbour posts its send and its receive together, so neither waits for the other.
  return launch("ncclSend/ncclRecv", [&](cudaStream_t s) {
    ncclResult_t r = nccl_.group_start();
    if (r == ncclSuccess && has_send) r = nccl_.send(send, static_cast<size_t>(send_bytes), ncclInt8, to, comm_, s);
    if (r == ncclSuccess && has_recv) r = nccl_.recv(recv, static_cast<size_t>(recv_bytes), ncclInt8, from, comm_, s);
    const ncclResult_t end = nccl_.group_end();
    return r != ncclSuccess ? r : end;
  });
}

StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key) {
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group, host_->split(color, key));
  Communicator* g = group.get();
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> c, create(g, std::move(group), device_, compute_));
  return std::unique_ptr<Communicator>(std::move(c));
}

void NcclCommunicator::abort(int code) {
  if (comm_ != nullptr) {
    nccl_.comm_abort(comm_);
    comm_ = nullptr;
  }
  host_->abort(code);
}

namespace {

// The factory for backend "cuda": the backend's device and compute stream.
StatusOr<std::unique_ptr<Communicator>> for_cuda(Communicator& host) {
  LMT_ASSIGN_OR_RETURN(kernels::Backend * backend, kernels::find_backend("cuda"));
  auto* cuda = dynamic_cast<kernels::cuda::CudaBackend*>(backend);
  if (cuda == nullptr) return Internal("backend 'cuda' is not the CUDA backend of this build");
  const kernels::cuda::Context& ctx = cuda->context();
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> c,
                       NcclCommunicator::create(&host, nullptr, ctx.device, ctx.stream));
  return std::unique_ptr<Communicator>(std::move(c));
}

[[maybe_unused]] const bool kRegistered = register_device_communicator("cuda", &for_cuda);

}  // namespace
}  // namespace lmt::dist::nccl
