// MpiCommunicator: Communicator over MPI_COMM_WORLD, or over a group of it made by split()
// (MPI_Comm_split; the group's MPI communicator is freed with the object). Open MPI here; any MPI-3
// library works.
// all_to_all_v is MPI_Alltoallv over MPI_BYTE. Non-blocking calls use MPI_Iallreduce / MPI_Ireduce_scatter / MPI_Iallgatherv; Open MPI's shared
// memory transport progresses them mostly inside MPI calls, so overlap with computation is partial
// on CPU (the request is tested as later buckets launch; docs/DIST.md).
//
// mpi_init() initialises MPI once per process (MPI_Init_thread, FUNNELED at least) and registers
// MPI_Finalize at exit; MPI errors are returned (MPI_ERRORS_RETURN), never abort, and name the rank.
// create() also sets each rank's OpenMP threads when OMP_NUM_THREADS is unset
// (default_threads_per_rank). Error messages name the rank in MPI_COMM_WORLD, also for a group.
// allocate_symmetric() shares memory among this communicator's ranks: it works for a group whose
// ranks all run on one node and is kUnimplemented otherwise.
// Counts above INT_MAX elements are split into several calls (blocking all-reduce) or rejected.
// Threading: the thread that created it makes every call. This header does not include mpi.h.
#pragma once

#include <memory>

#include "lmt/dist/communicator.h"

namespace lmt::dist {

// Idempotent; thread-unsafe (call it from main before other threads use MPI).
Status mpi_init();

class MpiCommunicator final : public Communicator {
 public:
  static StatusOr<std::unique_ptr<Communicator>> create();  // calls mpi_init()

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  const char* name() const override { return "mpi"; }
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
  std::unique_ptr<Request> recv_async(void* data, int64_t bytes, int peer) override;
  Status recv(void* data, int64_t bytes, int peer) override;
  Status barrier() override;
  StatusOr<std::unique_ptr<SymmetricBuffer>> allocate_symmetric(int64_t bytes) override;
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  void abort(int code) override;
  ~MpiCommunicator() override;

 private:
  struct Handle;  // the MPI_Comm (defined where mpi.h is included)
  MpiCommunicator(std::unique_ptr<Handle> handle, int rank, int world);
  std::unique_ptr<Handle> handle_;
  int rank_, world_;
};

}  // namespace lmt::dist
