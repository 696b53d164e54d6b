// Communicator: the collectives data parallelism needs (all-reduce, reduce-scatter, all-gather,
// broadcast, barrier), blocking and non-blocking, over f32 buffers, and split() into groups (the
// dp / tp / pp groups of dist/topology.h). Implementations: Solo (world 1, every collective a no-op
// or a copy) and MPI (mpi_communicator.h); NCCL for GPU memory (dist/nccl, device_communicator.h).
// rank() and world() are this communicator's: for a group made by split(), the rank within the
// group and the group's size.
//
// Contract. Every rank calls the same collectives in the same order with the same counts (as MPI
// requires); a mismatch is a caller bug that may hang. Layouts for the sharded collectives:
// `counts` has world() entries, rank r owns elements [offset(r), offset(r) + counts[r]) of a
// buffer of sum(counts) elements, offset(r) = counts[0] + ... + counts[r-1].
// Errors are Status values whose message names the rank ("rank 1/2: MPI_Allreduce: ...").
//
// Non-blocking calls return a Request; the buffers must stay alive and untouched until wait()
// returns. A Request must be waited on before destruction (the destructor waits, ignoring errors).
// Errors at launch are reported by wait().
//
// Threading: one thread uses a Communicator (MPI is initialised with at least FUNNELED support).
// Ownership: make_communicator() returns an owned object; MPI itself is initialised once per
// process (mpi_init()) and finalised at process exit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/dist/symmetric_buffer.h"

namespace lmt::dist {

class Request {
 public:
  virtual ~Request() = default;
  virtual Status wait() = 0;
  // Lets the library advance the operation (MPI_Test) without blocking; true once it is complete.
  // Open MPI moves non-blocking collectives forward only inside MPI calls, so callers poll
  // between pieces of computation. Errors are kept for wait().
  virtual bool test() { return false; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual const char* name() const = 0;  // "solo", "mpi", "nccl"
  // Whether the collectives also take device memory (dist/device_communicator.h); else host only.
  virtual bool device_buffers() const { return false; }

  // data[0, n) = sum over ranks of data[0, n), on every rank.
  virtual Status all_reduce_sum(float* data, int64_t n) = 0;
  virtual std::unique_ptr<Request> all_reduce_sum_async(float* data, int64_t n) = 0;
  // f64 variant (metrics, norms: a few scalars).
  virtual Status all_reduce_sum(double* data, int64_t n) = 0;
  // recv[0, counts[rank]) = sum over ranks of send[offset(rank), offset(rank) + counts[rank]).
  // send holds sum(counts) elements; recv must not overlap send.
  virtual Status reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) = 0;
  virtual std::unique_ptr<Request> reduce_scatter_sum_async(const float* send, float* recv,
                                                            const std::vector<int64_t>& counts) = 0;
  // In place: every rank contributes data[offset(rank), +counts[rank]) and receives all slices.
  virtual Status all_gather(float* data, const std::vector<int64_t>& counts) = 0;
  virtual std::unique_ptr<Request> all_gather_async(float* data, const std::vector<int64_t>& counts) = 0;
  // The same over 16-bit elements (bf16 bits): counts in elements.
  virtual std::unique_ptr<Request> all_gather_async(uint16_t* data, const std::vector<int64_t>& counts) = 0;
  // bytes of `data` from `root` to every rank.
  virtual Status broadcast(void* data, int64_t bytes, int root) = 0;
  // All-to-all with variable sizes, in bytes (any element type; MPI_Alltoallv over MPI_BYTE):
  // send_bytes[p] bytes from send + offset_p go to rank p, and recv + offset_p receives
  // recv_bytes[p] bytes from rank p (offsets: prefix sums, offsets_of()). recv_bytes[p] must equal
  // what rank p sends here (callers exchange the sizes first, e.g. with a fixed-size call).
  // send and recv must not overlap. Each buffer's total must be below 2^31 bytes (InvalidArgument).
  virtual Status all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                              const std::vector<int64_t>& recv_bytes) = 0;
  // Point-to-point (pipeline parallelism): `bytes` of `data` to rank `peer`, matched in order with
  // that peer's recv() from here of the same size. send_async returns at once; `data` must stay
  // valid and unchanged until the request completes. Each message is below 2^31 bytes
  // (InvalidArgument); peer must be another rank of this communicator.
  // Over MPI a non-blocking send of a large message moves only while both ranks are inside MPI
  // calls: post it together with the receive the rank needs next and wait for both (what the
  // pipeline schedule does), rather than computing with it in flight.
  virtual std::unique_ptr<Request> send_async(const void* data, int64_t bytes, int peer) = 0;
  virtual std::unique_ptr<Request> recv_async(void* data, int64_t bytes, int peer) = 0;
  // A send to `to` and a receive from `from` posted together, one request for both (send or recv
  // null: that half is left out); the pipeline's exchange between two operations, where each
  // neighbour posts the matching pair. The default posts send_async then recv_async. A library whose
  // separate calls wait for each other (NCCL: two ranks that both send first never finish) groups them.
  virtual std::unique_ptr<Request> send_recv_async(const void* send, int64_t send_bytes, int to, void* recv,
                                                   int64_t recv_bytes, int from);
  virtual Status recv(void* data, int64_t bytes, int peer) = 0;
  virtual Status barrier() = 0;
  // A buffer of `bytes` on every rank that the ranks of the node share (symmetric_buffer.h);
  // collective. kUnimplemented when the ranks span several nodes: use the collectives above.
  virtual StatusOr<std::unique_ptr<SymmetricBuffer>> allocate_symmetric(int64_t bytes) = 0;
  // Collective over this communicator (every rank calls it): the ranks that pass the same `color`
  // form one new communicator, ranked by `key` (ties: by rank here), as MPI_Comm_split. color >= 0
  // (InvalidArgument otherwise). The result is independent of this one (either may be destroyed
  // first) and is used by the same thread. Solo: a solo communicator.
  virtual StatusOr<std::unique_ptr<Communicator>> split(int color, int key) = 0;
  // After an error on some ranks only: ends every rank of the job (MPI_Abort on the whole job, also
  // from a group) so none waits forever in a collective. Solo: does nothing (the caller returns its
  // error normally).
  virtual void abort(int code) = 0;
  // An error the communicator's library found in the background, which its calls have not returned
  // yet (NCCL's ncclCommGetAsyncError: a lost peer or link leaves its kernels waiting forever).
  // Thread-safe: the trainer's stall watchdog polls it from its own thread. Ok for MPI and solo.
  virtual Status async_error() const { return Status::Ok(); }

  bool is_root() const { return rank() == 0; }
};

// A Request already complete, carrying `status` (solo calls, launch errors).
std::unique_ptr<Request> completed_request(Status status);

// World 1: all_reduce, broadcast and barrier do nothing; reduce_scatter and all_to_all_v copy; all_gather does nothing;
// a symmetric buffer is heap memory whose collectives only check their arguments.
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  const char* name() const override { return "solo"; }
  Status all_reduce_sum(float*, int64_t) override { return Status::Ok(); }
  std::unique_ptr<Request> all_reduce_sum_async(float*, int64_t) override { return completed_request(Status::Ok()); }
  Status all_reduce_sum(double*, int64_t) override { return Status::Ok(); }
  Status reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Request> reduce_scatter_sum_async(const float* send, float* recv,
                                                    const std::vector<int64_t>& counts) override {
    return completed_request(reduce_scatter_sum(send, recv, counts));
  }
  Status all_gather(float*, const std::vector<int64_t>& counts) override;
  std::unique_ptr<Request> all_gather_async(float* data, const std::vector<int64_t>& counts) override {
    return completed_request(all_gather(data, counts));
  }
  std::unique_ptr<Request> all_gather_async(uint16_t*, const std::vector<int64_t>& counts) override {
    return completed_request(all_gather(static_cast<float*>(nullptr), counts));  // checks the counts
  }
  Status broadcast(void*, int64_t, int root) override;
  Status all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                      const std::vector<int64_t>& recv_bytes) override;
  // A world of one has no peer: FailedPrecondition.
  std::unique_ptr<Request> send_async(const void*, int64_t, int peer) override;
  std::unique_ptr<Request> recv_async(void*, int64_t, int peer) override;
  Status recv(void*, int64_t, int peer) override;
  Status barrier() override { return Status::Ok(); }
  StatusOr<std::unique_ptr<SymmetricBuffer>> allocate_symmetric(int64_t bytes) override;
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  void abort(int) override {}
};

// True when this process was started by a launcher that expects MPI (mpirun / mpiexec of Open MPI
// or MPICH, or Slurm's srun with PMI): OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set.
bool launched_by_mpi();

// MPI when launched_by_mpi(), else solo. Errors: kFailedPrecondition when launched by mpirun but
// built without MPI, kInternal when MPI fails to initialise.
StatusOr<std::unique_ptr<Communicator>> make_communicator();

// OpenMP threads for one of `local_ranks` ranks on this node: the CPUs it may run on (its affinity
// mask: a launcher that binds ranks to cores narrows it), but no more than its share of the
// node's online CPUs; at least 1. make_communicator() applies it under MPI when OMP_NUM_THREADS is
// unset, so ranks never oversubscribe the cores.
int default_threads_per_rank(int local_ranks);

// Prefix-sum offsets of `counts` (world + 1 entries, from 0).
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts);

// Ok when `counts` has one entry per rank of a world of `world`, none negative; else
// InvalidArgument naming `what` (the collective) with a hint.
Status check_counts(const std::vector<int64_t>& counts, int world, const char* what);

}  // namespace lmt::dist
