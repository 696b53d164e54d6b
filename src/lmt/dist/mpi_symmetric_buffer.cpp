// MPI implementation of SymmetricBuffer: MPI_Win_allocate_shared over the ranks of one node, peers'
// parts found with MPI_Win_shared_query, and collectives that read them directly. Synchronisation:
// the window is locked for its lifetime (MPI_Win_lock_all, MPI_MODE_NOCHECK), and every phase
// boundary is MPI_Win_sync + MPI_Barrier + MPI_Win_sync (the MPI-3 recipe for shared memory).
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "lmt/dist/communicator.h"
#include "lmt/dist/mpi_internal.h"

namespace lmt::dist {
namespace {

constexpr int64_t kAlign = 64;

char* align_up(void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<char*>((a + kAlign - 1) / kAlign * kAlign);
}

// Copies `bytes` from `src` to `dst` with the OpenMP threads (large gathers are bandwidth-bound).
void parallel_copy(char* dst, const char* src, int64_t bytes) {
  constexpr int64_t kChunk = 1 << 20;
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk;
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(std::min(kChunk, bytes - lo)));
  }
}

class MpiSymmetricBuffer final : public SymmetricBuffer {
 public:
  ~MpiSymmetricBuffer() override {
    if (win_ != MPI_WIN_NULL) {
      if (locked_) MPI_Win_unlock_all(win_);
      MPI_Win_free(&win_);
    }
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  }

  // `comm`: the ranks that share the buffer (MPI_COMM_WORLD or a group of it).
  static StatusOr<std::unique_ptr<SymmetricBuffer>> create(MPI_Comm comm, int64_t bytes) {
    auto b = std::unique_ptr<MpiSymmetricBuffer>(new MpiSymmetricBuffer());
    int comm_rank = 0, world = 1;
    MPI_Comm_rank(comm, &comm_rank);
    MPI_Comm_size(comm, &world);
    // Keyed by the rank in `comm`, so when every rank is on this node, node rank = rank in `comm`.
    LMT_RETURN_IF_ERROR(mpi_status(
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, comm_rank, MPI_INFO_NULL, &b->node_),
        "MPI_Comm_split_type"));
    int node_size = 0;
    MPI_Comm_size(b->node_, &node_size);
    if (node_size != world)
      return Unimplemented(rank_prefix() + "symmetric memory needs every rank of the group on one node; this node has " +
                           std::to_string(node_size) + " of " + std::to_string(world) + " ranks");
    MPI_Comm_rank(b->node_, &b->rank_);
    b->world_ = world;
    b->bytes_ = std::max<int64_t>(bytes, 0);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each part page-aligned, placed near its rank
    char* base = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(b->bytes_ + kAlign), 1, info, b->node_, &base, &b->win_);
    MPI_Info_free(&info);
    LMT_RETURN_IF_ERROR(mpi_status(rc, "MPI_Win_allocate_shared"));
    MPI_Win_set_errhandler(b->win_, MPI_ERRORS_RETURN);  // windows default to aborting
    b->parts_.resize(static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) {
      MPI_Aint size = 0;
      int disp = 0;
      void* p = nullptr;
      LMT_RETURN_IF_ERROR(mpi_status(MPI_Win_shared_query(b->win_, q, &size, &disp, &p), "MPI_Win_shared_query"));
      // The same physical part is mapped page-aligned in every process, so every rank rounds it alike.
      b->parts_[static_cast<size_t>(q)] = align_up(p);
    }
    LMT_RETURN_IF_ERROR(mpi_status(MPI_Win_lock_all(MPI_MODE_NOCHECK, b->win_), "MPI_Win_lock_all"));
    b->locked_ = true;
    std::memset(b->parts_[static_cast<size_t>(b->rank_)], 0, static_cast<size_t>(b->bytes_));
    LMT_RETURN_IF_ERROR(b->sync("MPI_Barrier (symmetric buffer creation)"));
    return std::unique_ptr<SymmetricBuffer>(std::move(b));
  }

  void* data() override { return parts_[static_cast<size_t>(rank_)]; }
  int64_t bytes() const override { return bytes_; }

  Status all_reduce_sum_f32(int64_t first, int64_t n) override {
    // A reduce-scatter into near-equal slices, then an all-gather of the slices.
    std::vector<int64_t> counts(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) counts[static_cast<size_t>(r)] = n * (r + 1) / world_ - n * r / world_;
    LMT_RETURN_IF_ERROR(check_symmetric_range("all_reduce_sum_f32", rank_, world_, bytes_, 4, first, counts));
    LMT_RETURN_IF_ERROR(reduce_own_slice(first, counts));
    std::vector<int64_t> byte_counts(counts);
    for (auto& c : byte_counts) c *= 4;
    return gather_slices(first * 4, byte_counts);
  }

  Status reduce_scatter_sum_f32(int64_t first, const std::vector<int64_t>& counts) override {
    LMT_RETURN_IF_ERROR(check_symmetric_range("reduce_scatter_sum_f32", rank_, world_, bytes_, 4, first, counts));
    LMT_RETURN_IF_ERROR(reduce_own_slice(first, counts));
    return sync("MPI_Barrier (reduce-scatter end)");
  }

  Status all_gather_bytes(int64_t first, const std::vector<int64_t>& counts) override {
    LMT_RETURN_IF_ERROR(check_symmetric_range("all_gather_bytes", rank_, world_, bytes_, 1, first, counts));
    return gather_slices(first, counts);
  }

 private:
  MpiSymmetricBuffer() = default;

  Status sync(const char* what) {
    MPI_Win_sync(win_);
    LMT_RETURN_IF_ERROR(mpi_status(MPI_Barrier(node_), what));
    MPI_Win_sync(win_);
    return Status::Ok();
  }

  // Barrier; this rank's slice := the sum of every part's slice.
  Status reduce_own_slice(int64_t first, const std::vector<int64_t>& counts) {
    LMT_RETURN_IF_ERROR(sync("MPI_Barrier (reduce start)"));
    const std::vector<int64_t> off = offsets_of(counts);
    const int64_t lo = first + off[static_cast<size_t>(rank_)], n = counts[static_cast<size_t>(rank_)];
    std::vector<const float*> in(static_cast<size_t>(world_));
    for (int q = 0; q < world_; ++q) in[static_cast<size_t>(q)] = reinterpret_cast<const float*>(parts_[static_cast<size_t>(q)]) + lo;
    if (n > 0) sum_parts_f32(reinterpret_cast<float*>(data()) + lo, in.data(), world_, n);
    return Status::Ok();
  }

  // Barrier (every slice is final); copy the peers' slices into this part; barrier (peers done reading).
  Status gather_slices(int64_t first, const std::vector<int64_t>& counts) {
    LMT_RETURN_IF_ERROR(sync("MPI_Barrier (gather start)"));
    const std::vector<int64_t> off = offsets_of(counts);
    for (int q = 0; q < world_; ++q) {
      if (q == rank_ || counts[static_cast<size_t>(q)] == 0) continue;
      const int64_t lo = first + off[static_cast<size_t>(q)];
      parallel_copy(parts_[static_cast<size_t>(rank_)] + lo, parts_[static_cast<size_t>(q)] + lo, counts[static_cast<size_t>(q)]);
    }
    return sync("MPI_Barrier (gather end)");
  }

  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  int rank_ = 0, world_ = 1;
  bool locked_ = false;  // MPI_Win_lock_all held (released before MPI_Win_free)
  int64_t bytes_ = 0;
  std::vector<char*> parts_;  // every rank's part, 64-byte aligned, in this process's address space
};

}  // namespace

StatusOr<std::unique_ptr<SymmetricBuffer>> allocate_mpi_symmetric(MPI_Comm comm, int64_t bytes) {
  return MpiSymmetricBuffer::create(comm, bytes);
}

}  // namespace lmt::dist
