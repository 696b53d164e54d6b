#include "lmt/dist/communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lmt/base/check.h"
#include "lmt/dist/mpi_communicator.h"

namespace lmt::dist {
namespace {

class CompletedRequest final : public Request {
 public:
  explicit CompletedRequest(Status s) : status_(std::move(s)) {}
  Status wait() override { return status_; }
  bool test() override { return true; }

 private:
  Status status_;
};

// Two requests as one: wait() waits for both (the first error is kept), test() is true once both are.
class PairRequest final : public Request {
 public:
  PairRequest(std::unique_ptr<Request> a, std::unique_ptr<Request> b) : a_(std::move(a)), b_(std::move(b)) {}
  Status wait() override {
    Status s = a_ ? a_->wait() : Status::Ok();
    const Status t = b_ ? b_->wait() : Status::Ok();
    return s.ok() ? t : s;
  }
  bool test() override {
    const bool a = !a_ || a_->test();
    const bool b = !b_ || b_->test();
    return a && b;
  }

 private:
  std::unique_ptr<Request> a_, b_;
};

// World 1: the buffer is the only part; every collective leaves it as it is.
class LocalSymmetricBuffer final : public SymmetricBuffer {
 public:
  explicit LocalSymmetricBuffer(int64_t bytes) : bytes_(std::max<int64_t>(bytes, 0)) {
    const size_t rounded = static_cast<size_t>((bytes_ + 63) / 64 * 64 + 64);
    mem_ = std::aligned_alloc(64, rounded);
    LMT_CHECK(mem_ != nullptr) << "out of memory allocating a symmetric buffer of " << bytes_ << " bytes";
    std::memset(mem_, 0, rounded);
  }
  ~LocalSymmetricBuffer() override { std::free(mem_); }
  void* data() override { return mem_; }
  int64_t bytes() const override { return bytes_; }
  Status all_reduce_sum_f32(int64_t first, int64_t n) override {
    return check_symmetric_range("all_reduce_sum_f32", 0, 1, bytes_, 4, first, {n});
  }
  Status reduce_scatter_sum_f32(int64_t first, const std::vector<int64_t>& counts) override {
    return check_symmetric_range("reduce_scatter_sum_f32", 0, 1, bytes_, 4, first, counts);
  }
  Status all_gather_bytes(int64_t first, const std::vector<int64_t>& counts) override {
    return check_symmetric_range("all_gather_bytes", 0, 1, bytes_, 1, first, counts);
  }

 private:
  int64_t bytes_;
  void* mem_;
};

}  // namespace

std::unique_ptr<Request> completed_request(Status status) { return std::make_unique<CompletedRequest>(std::move(status)); }

std::unique_ptr<Request> Communicator::send_recv_async(const void* send, int64_t send_bytes, int to, void* recv,
                                                       int64_t recv_bytes, int from) {
  std::unique_ptr<Request> out = send != nullptr ? send_async(send, send_bytes, to) : nullptr;
  std::unique_ptr<Request> in = recv != nullptr ? recv_async(recv, recv_bytes, from) : nullptr;
  return std::make_unique<PairRequest>(std::move(out), std::move(in));
}

Status check_counts(const std::vector<int64_t>& counts, int world, const char* what) {
  if (static_cast<int>(counts.size()) != world)
    return InvalidArgument(std::string(what) + ": " + std::to_string(counts.size()) + " counts for a world of " +
                               std::to_string(world),
                           "pass one count per rank");
  for (int64_t c : counts)
    if (c < 0) return InvalidArgument(std::string(what) + ": a negative count", "counts are sizes >= 0");
  return Status::Ok();
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> o(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) o[i + 1] = o[i] + counts[i];
  return o;
}

Status SoloCommunicator::reduce_scatter_sum(const float* send, float* recv, const std::vector<int64_t>& counts) {
  LMT_RETURN_IF_ERROR(check_counts(counts, 1, "reduce_scatter_sum"));
  if (counts[0] > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(counts[0]) * sizeof(float));
  return Status::Ok();
}

Status SoloCommunicator::all_gather(float*, const std::vector<int64_t>& counts) {
  return check_counts(counts, 1, "all_gather");
}

Status SoloCommunicator::broadcast(void*, int64_t, int root) {
  if (root != 0) return InvalidArgument("broadcast root " + std::to_string(root) + " outside a world of 1");
  return Status::Ok();
}

Status SoloCommunicator::all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                      const std::vector<int64_t>& recv_bytes) {
  LMT_RETURN_IF_ERROR(check_counts(send_bytes, 1, "all_to_all_v (send)"));
  LMT_RETURN_IF_ERROR(check_counts(recv_bytes, 1, "all_to_all_v (recv)"));
  if (send_bytes[0] != recv_bytes[0] || send_bytes[0] < 0)
    return InvalidArgument("all_to_all_v: sends " + std::to_string(send_bytes[0]) + " bytes to itself but expects " +
                               std::to_string(recv_bytes[0]),
                           "in a world of 1 the send and receive sizes are the same");
  if (send_bytes[0] > 0) std::memcpy(recv, send, static_cast<size_t>(send_bytes[0]));
  return Status::Ok();
}

namespace {
Status no_peer(int peer) {
  return FailedPrecondition("point-to-point message with rank " + std::to_string(peer) + " in a world of 1",
                            "pipeline parallelism needs its stages on several ranks (mpirun -np N)");
}
}  // namespace

std::unique_ptr<Request> SoloCommunicator::send_async(const void*, int64_t, int peer) {
  return completed_request(no_peer(peer));
}

std::unique_ptr<Request> SoloCommunicator::recv_async(void*, int64_t, int peer) {
  return completed_request(no_peer(peer));
}

Status SoloCommunicator::recv(void*, int64_t, int peer) { return no_peer(peer); }

StatusOr<std::unique_ptr<SymmetricBuffer>> SoloCommunicator::allocate_symmetric(int64_t bytes) {
  return std::unique_ptr<SymmetricBuffer>(new LocalSymmetricBuffer(bytes));
}

StatusOr<std::unique_ptr<Communicator>> SoloCommunicator::split(int color, int) {
  if (color < 0) return InvalidArgument("split: color " + std::to_string(color) + " is negative", "pass a color >= 0");
  return std::unique_ptr<Communicator>(new SoloCommunicator());
}

int default_threads_per_rank(int local_ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int share = static_cast<int>(std::max<long>(1, online) / std::max(1, local_ranks));
  return std::max(1, std::min(allowed, share));
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

StatusOr<std::unique_ptr<Communicator>> make_communicator() {
  if (!launched_by_mpi()) return std::unique_ptr<Communicator>(new SoloCommunicator());
#ifdef LMT_HAVE_MPI
  return MpiCommunicator::create();
#else
  return FailedPrecondition("launched by mpirun, but this lmtrain was built without MPI",
                            "install libopenmpi-dev (scripts/setup.sh) and rebuild, or run without mpirun");
#endif
}

}  // namespace lmt::dist
