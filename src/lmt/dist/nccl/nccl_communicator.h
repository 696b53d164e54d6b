// NcclCommunicator: the Communicator API (dist/communicator.h) where buffers in GPU memory go
// through NCCL and host buffers through the MPI communicator it wraps, for data parallelism on the
// cuda backend (one process per GPU; dist/device_communicator.h registers it for "cuda").
//
// Which path: each call looks at its buffer (cudaPointerGetAttributes): device or managed memory
// takes NCCL, anything else the host communicator. A call's buffers are all of one kind (else
// InvalidArgument), and every rank passes the same kind (as every rank calls the same collectives).
//
// Ordering with the backend: NCCL runs on its own stream. A call first makes that stream wait for
// everything queued so far on the compute stream (an event), so a collective reads what the ops
// before it wrote; Request::wait() makes the compute stream wait for the collective, so the ops
// after it read its result. wait() does not block the host: host code that reads a device buffer
// goes through the backend's copies, which synchronise. test() asks whether the collective is done.
// Non-blocking calls thus overlap with the compute stream's later work (DDP buckets with backward).
//
// Shapes: NCCL's reduce-scatter and all-gather need equal parts; with unequal `counts` (balanced
// ZeRO shards) they run as one group of per-rank reduces or broadcasts instead. all_to_all_v on
// device memory (expert parallelism's rows) is one group of ncclSend/ncclRecv per peer, this rank's
// own part a device copy, and returns once the compute stream waits for it; barrier, splits and
// symmetric buffers are the host communicator's (a split makes a new NCCL communicator per group,
// its id broadcast over the group's MPI communicator when it is first used).
//
// Set-up: the NCCL communicator is made at the first call on device memory (its id broadcast over
// the host communicator), so groups that never reduce device memory cost nothing.
//
// Errors: NCCL and CUDA failures are Status values naming the rank and the call; after one, the
// destructor aborts the NCCL communicator instead of waiting for its queue. A failure on one rank
// alone (or a peer that dies) can leave the others waiting in a collective: the caller ends the job
// (abort(); lmtrain train does). async_error() reports what NCCL found in the background (the
// trainer's stall watchdog polls it and ends the rank). send_async and recv_async are separate
// NCCL calls: two ranks that both send first deadlock, so send_recv_async (the pipeline's exchange)
// posts its pair as one NCCL group; and on more than two ranks they cannot be a communicator's first
// device call (FailedPrecondition: the start is collective).
#pragma once

#include <atomic>
#include <memory>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/dist/nccl/nccl_library.h"

namespace lmt::dist::nccl {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host` (every rank calls it): one NCCL communicator over host's ranks, on CUDA
  // device `device`, ordered with `compute` (a stream of that device). `host` must outlive the
  // result unless `owned` holds it.
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(Communicator* host, std::unique_ptr<Communicator> owned,
                                                            int device, cudaStream_t compute);
  ~NcclCommunicator() override;

  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  const char* name() const override { return "nccl"; }
  bool device_buffers() const override { return true; }

  Status all_reduce_sum(float* data, int64_t n) override;
  std::unique_ptr<Request> all_reduce_sum_async(float* data, int64_t n) override;
  Status all_reduce_sum(double* data, int64_t n) override;
  Status reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Request> reduce_scatter_sum_async(const float* send, float* recv,
                                                    const std::vector<int64_t>& counts) override;
  Status all_gather(float* data, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Request> all_gather_async(float* data, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Request> all_gather_async(uint16_t* data, const std::vector<int64_t>& counts) override;
  Status broadcast(void* data, int64_t bytes, int root) override;
  Status all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                      const std::vector<int64_t>& recv_bytes) override;
  std::unique_ptr<Request> send_async(const void* data, int64_t bytes, int peer) override;
  std::unique_ptr<Request> send_recv_async(const void* send, int64_t send_bytes, int to, void* recv,
                                           int64_t recv_bytes, int from) override;
  std::unique_ptr<Request> recv_async(void* data, int64_t bytes, int peer) override;
  Status recv(void* data, int64_t bytes, int peer) override;
  Status barrier() override { return host_->barrier(); }
  StatusOr<std::unique_ptr<SymmetricBuffer>> allocate_symmetric(int64_t bytes) override {
    return host_->allocate_symmetric(bytes);
  }
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  void abort(int code) override;
  // ncclCommGetAsyncError of the NCCL communicator once started (Ok before).
  Status async_error() const override;

  int version() const { return nccl_.version; }
  // Reduce-scatters and all-gathers as groups of per-rank rooted calls even when the parts are equal
  // (the path of unequal parts), so that a one-GPU test runs it; off by default.
  void use_rooted_parts(bool on) { rooted_parts_ = on; }

 private:
  NcclCommunicator(const Library& nccl, Communicator* host, std::unique_ptr<Communicator> owned, int device,
                   cudaStream_t compute)
      : nccl_(nccl), host_(host), owned_host_(std::move(owned)), device_(device), compute_(compute) {}
  // Queues enqueue(stream) on the NCCL stream after the compute stream's work so far; the request's
  // wait() orders the compute stream after it.
  template <typename Enqueue>
  std::unique_ptr<Request> launch(const char* what, Enqueue&& enqueue);
  // Per-rank parts: all equal (NCCL's own collective) or not (a group of rooted calls).
  std::unique_ptr<Request> gather_parts(char* data, const std::vector<int64_t>& counts, size_t elem_bytes,
                                        const char* what);
  Status error(const char* what, const std::string& detail) const;
  Status check_peer(int peer, const char* what) const;         // another rank of this communicator
  bool equal_parts(const std::vector<int64_t>& counts) const;  // NCCL's own collective applies
  // Makes the NCCL communicator at the first device collective (collective over host_, which every
  // rank reaches at the same call, as every rank calls the same collectives): groups that never
  // reduce device memory (the world, groups of one rank) cost no NCCL set-up.
  Status start();

  const Library& nccl_;
  Communicator* host_;
  std::unique_ptr<Communicator> owned_host_;
  int device_;
  cudaStream_t compute_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::atomic<ncclComm_t> started_{nullptr};  // comm_ once started, for async_error() on other threads
  Status start_error_;         // start()'s failure, returned again by later calls
  bool failed_ = false;        // an error happened: the destructor aborts instead of waiting for the queue
  bool rooted_parts_ = false;  // use_rooted_parts()

  friend class NcclRequest;
};

}  // namespace lmt::dist::nccl
