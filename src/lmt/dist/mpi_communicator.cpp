#include "lmt/dist/mpi_communicator.h"

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "lmt/dist/mpi_internal.h"

namespace lmt::dist {

std::string rank_prefix() {
  int r = -1, w = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return "rank " + std::to_string(r) + "/" + std::to_string(w) + ": ";
}

Status mpi_status(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Internal(rank_prefix() + call + " failed: " + std::string(text, static_cast<size_t>(len)),
                  "another rank may have died; its log names the first error");
}

namespace {

Status to_int_counts(const std::vector<int64_t>& counts, int world, const char* call, std::vector<int>* out,
                     std::vector<int>* displs) {
  if (static_cast<int>(counts.size()) != world)
    return InvalidArgument(rank_prefix() + call + ": " + std::to_string(counts.size()) + " counts for a world of " +
                               std::to_string(world),
                           "pass one count per rank");
  out->resize(counts.size());
  if (displs) displs->resize(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0 || counts[i] > INT_MAX || off > INT_MAX)
      return InvalidArgument(rank_prefix() + call + ": count " + std::to_string(counts[i]) + " at offset " +
                                 std::to_string(off) + " exceeds MPI's int range",
                             "shard the buffer into pieces below 2^31 elements");
    (*out)[i] = static_cast<int>(counts[i]);
    if (displs) (*displs)[i] = static_cast<int>(off);
    off += counts[i];
  }
  return Status::Ok();
}

// Owns the MPI_Request and whatever the call's arguments must outlive (int count arrays).
class MpiRequest final : public Request {
 public:
  MpiRequest(const char* call, std::vector<int> counts, std::vector<int> displs)
      : call_(call), counts_(std::move(counts)), displs_(std::move(displs)) {}
  ~MpiRequest() override {
    if (!done_) (void)wait();
  }
  Status wait() override {
    if (done_) return Status::Ok();
    done_ = true;
    return mpi_status(MPI_Wait(&req_, MPI_STATUS_IGNORE), call_);
  }
  bool test() override {
    if (done_ || req_ == MPI_REQUEST_NULL) return true;
    int flag = 0;
    if (MPI_Test(&req_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true;  // wait() reports it
    return flag != 0;
  }
  MPI_Request req_ = MPI_REQUEST_NULL;
  const char* call_;
  std::vector<int> counts_, displs_;
  bool done_ = false;
};

std::unique_ptr<Request> launched(std::unique_ptr<MpiRequest> r, int rc) {
  if (rc != MPI_SUCCESS) {
    r->done_ = true;
    return completed_request(mpi_status(rc, r->call_));
  }
  return r;
}

}  // namespace

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;  // made by split(): freed with the communicator
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle, int rank, int world)
    : handle_(std::move(handle)), rank_(rank), world_(world) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);  // a communicator that outlives MPI (a static) has nothing left to free
  if (handle_->owned && handle_->comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&handle_->comm);
}

Status mpi_init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Status::Ok();
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return Internal("MPI_Init_thread failed (error " + std::to_string(rc) + ")",
                                         "check the mpirun flags in docs/DIST.md");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_FUNNELED)
    return FailedPrecondition(rank_prefix() + "MPI provides thread level " + std::to_string(provided) +
                                  ", below MPI_THREAD_FUNNELED",
                              "use an MPI library built with thread support");
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  return Status::Ok();
}

StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::create() {
  LMT_RETURN_IF_ERROR(mpi_init());
  int r = 0, w = 1;
  LMT_RETURN_IF_ERROR(mpi_status(MPI_Comm_rank(MPI_COMM_WORLD, &r), "MPI_Comm_rank"));
  LMT_RETURN_IF_ERROR(mpi_status(MPI_Comm_size(MPI_COMM_WORLD, &w), "MPI_Comm_size"));
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    MPI_Comm node = MPI_COMM_NULL;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
      MPI_Comm_size(node, &local);
      MPI_Comm_free(&node);
    }
    omp_set_num_threads(default_threads_per_rank(local));
  }
  auto h = std::make_unique<Handle>();
  h->comm = MPI_COMM_WORLD;
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(h), r, w));
}

StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key) {
  if (color < 0)
    return InvalidArgument(rank_prefix() + "split: color " + std::to_string(color) + " is negative", "pass a color >= 0");
  auto h = std::make_unique<Handle>();
  LMT_RETURN_IF_ERROR(mpi_status(MPI_Comm_split(handle_->comm, color, key, &h->comm), "MPI_Comm_split"));
  h->owned = true;
  MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);  // inherited already; stated, as every error is returned
  int r = 0, w = 1;
  LMT_RETURN_IF_ERROR(mpi_status(MPI_Comm_rank(h->comm, &r), "MPI_Comm_rank"));
  LMT_RETURN_IF_ERROR(mpi_status(MPI_Comm_size(h->comm, &w), "MPI_Comm_size"));
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(h), r, w));
}


Status MpiCommunicator::all_reduce_sum(float* data, int64_t n) {
  for (int64_t off = 0; off < n; off += INT_MAX) {
    const int c = static_cast<int>(std::min<int64_t>(n - off, INT_MAX));
    LMT_RETURN_IF_ERROR(mpi_status(MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_FLOAT, MPI_SUM, handle_->comm),
                                   "MPI_Allreduce"));
  }
  return Status::Ok();
}

Status MpiCommunicator::all_reduce_sum(double* data, int64_t n) {
  if (n > INT_MAX) return InvalidArgument(rank_prefix() + "all_reduce_sum(double): too many elements");
  return mpi_status(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, handle_->comm),
                    "MPI_Allreduce");
}

std::unique_ptr<Request> MpiCommunicator::all_reduce_sum_async(float* data, int64_t n) {
  if (n > INT_MAX)
    return completed_request(InvalidArgument(rank_prefix() + "MPI_Iallreduce: " + std::to_string(n) +
                                                 " elements exceed MPI's int range",
                                             "use smaller buckets (dist.bucket_mb)"));
  auto r = std::make_unique<MpiRequest>("MPI_Iallreduce", std::vector<int>{}, std::vector<int>{});
  const int rc = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, handle_->comm, &r->req_);
  return launched(std::move(r), rc);
}

Status MpiCommunicator::reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) {
  return reduce_scatter_sum_async(send, recv, counts)->wait();
}

std::unique_ptr<Request> MpiCommunicator::reduce_scatter_sum_async(const float* send, float* recv,
                                                                   const std::vector<int64_t>& counts) {
  std::vector<int> c;
  Status s = to_int_counts(counts, world_, "MPI_Ireduce_scatter", &c, nullptr);
  if (!s.ok()) return completed_request(s);
  auto r = std::make_unique<MpiRequest>("MPI_Ireduce_scatter", std::move(c), std::vector<int>{});
  const int rc = MPI_Ireduce_scatter(send, recv, r->counts_.data(), MPI_FLOAT, MPI_SUM, handle_->comm, &r->req_);
  return launched(std::move(r), rc);
}

Status MpiCommunicator::all_gather(float* data, const std::vector<int64_t>& counts) {
  return all_gather_async(data, counts)->wait();
}

namespace {
// In-place MPI_Iallgatherv of `counts` elements of `type` per rank.
std::unique_ptr<Request> all_gather_in_place(void* data, const std::vector<int64_t>& counts, MPI_Datatype type,
                                             int world, MPI_Comm comm) {
  std::vector<int> c, d;
  Status s = to_int_counts(counts, world, "MPI_Iallgatherv", &c, &d);
  if (!s.ok()) return completed_request(s);
  auto r = std::make_unique<MpiRequest>("MPI_Iallgatherv", std::move(c), std::move(d));
  const int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, r->counts_.data(), r->displs_.data(), type,
                                 comm, &r->req_);
  return launched(std::move(r), rc);
}
}  // namespace

std::unique_ptr<Request> MpiCommunicator::all_gather_async(float* data, const std::vector<int64_t>& counts) {
  return all_gather_in_place(data, counts, MPI_FLOAT, world_, handle_->comm);
}

std::unique_ptr<Request> MpiCommunicator::all_gather_async(uint16_t* data, const std::vector<int64_t>& counts) {
  return all_gather_in_place(data, counts, MPI_UINT16_T, world_, handle_->comm);
}

Status MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
  if (root < 0 || root >= world_)
    return InvalidArgument(rank_prefix() + "broadcast root " + std::to_string(root) + " outside the world");
  auto* p = static_cast<char*>(data);
  for (int64_t off = 0; off < bytes; off += INT_MAX) {
    const int c = static_cast<int>(std::min<int64_t>(bytes - off, INT_MAX));
    LMT_RETURN_IF_ERROR(mpi_status(MPI_Bcast(p + off, c, MPI_BYTE, root, handle_->comm), "MPI_Bcast"));
  }
  return Status::Ok();
}

Status MpiCommunicator::all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                     const std::vector<int64_t>& recv_bytes) {
  std::vector<int> sc, sd, rc, rd;
  LMT_RETURN_IF_ERROR(to_int_counts(send_bytes, world_, "MPI_Alltoallv (send bytes)", &sc, &sd));
  LMT_RETURN_IF_ERROR(to_int_counts(recv_bytes, world_, "MPI_Alltoallv (recv bytes)", &rc, &rd));
  return mpi_status(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE,
                                  handle_->comm),
                    "MPI_Alltoallv");
}

namespace {
constexpr int kPointToPointTag = 7;  // lmtrain's only tag: messages between a pair match in order

Status check_p2p(const char* call, int64_t bytes, int peer, int rank, int world) {
  if (peer < 0 || peer >= world || peer == rank)
    return InvalidArgument(rank_prefix() + call + ": peer " + std::to_string(peer) + " is not another rank of a world of " +
                           std::to_string(world));
  if (bytes < 0 || bytes > INT_MAX)
    return InvalidArgument(rank_prefix() + call + ": " + std::to_string(bytes) + " bytes exceed MPI's int range",
                           "send pieces below 2^31 bytes (a smaller micro-batch)");
  return Status::Ok();
}
}  // namespace

std::unique_ptr<Request> MpiCommunicator::send_async(const void* data, int64_t bytes, int peer) {
  Status s = check_p2p("MPI_Isend", bytes, peer, rank_, world_);
  if (!s.ok()) return completed_request(s);
  auto r = std::make_unique<MpiRequest>("MPI_Isend", std::vector<int>{}, std::vector<int>{});
  const int rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, kPointToPointTag, handle_->comm, &r->req_);
  return launched(std::move(r), rc);
}

std::unique_ptr<Request> MpiCommunicator::recv_async(void* data, int64_t bytes, int peer) {
  Status s = check_p2p("MPI_Irecv", bytes, peer, rank_, world_);
  if (!s.ok()) return completed_request(s);
  auto r = std::make_unique<MpiRequest>("MPI_Irecv", std::vector<int>{}, std::vector<int>{});
  const int rc = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, kPointToPointTag, handle_->comm, &r->req_);
  return launched(std::move(r), rc);
}

Status MpiCommunicator::recv(void* data, int64_t bytes, int peer) {
  LMT_RETURN_IF_ERROR(check_p2p("MPI_Recv", bytes, peer, rank_, world_));
  return mpi_status(MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, peer, kPointToPointTag, handle_->comm,
                             MPI_STATUS_IGNORE),
                    "MPI_Recv");
}

StatusOr<std::unique_ptr<SymmetricBuffer>> MpiCommunicator::allocate_symmetric(int64_t bytes) {
  return allocate_mpi_symmetric(handle_->comm, bytes);
}

void MpiCommunicator::abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

Status MpiCommunicator::barrier() { return mpi_status(MPI_Barrier(handle_->comm), "MPI_Barrier"); }

}  // namespace lmt::dist
