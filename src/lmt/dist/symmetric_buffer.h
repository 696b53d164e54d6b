// SymmetricBuffer: a buffer of the same size on every rank that every rank of the node can read and
// write directly (an MPI-3 shared-memory window; PyTorch calls the idea "symmetric memory"), with
// collectives that read the peers' parts instead of sending messages. Between processes of one
// node this costs one pass over the data: on 475 MiB of f32 between two ranks a reduce-scatter
// takes ~30 ms here, against ~320 ms for MPI_Allreduce through Open MPI's shared-memory transport
// (`lmtrain bench collectives`, docs/PERFORMANCE.md). Data parallelism keeps the model's parameters, gradients and bf16 mirror in such
// buffers when every rank runs on one node.
//
// Contract.
// - Creation (Communicator::allocate_symmetric) and destruction are collective: every rank of the
//   node, in the same order, with the same size.
// - Every rank calls each collective with the same arguments. A collective starts with a node
//   barrier (every part holds its input) and ends with one (every part holds its output, and no
//   peer reads this rank's part any more): the caller may overwrite its part as soon as it returns.
// - Sharded layouts as in communicator.h: `counts` has world() entries; rank r's slice starts at
//   first + offset(r), offset(r) = counts[0] + ... + counts[r-1].
// - Sums are taken in rank order ((x0 + x1) + x2 ...) by the slice's owner, so every rank ends with
//   bitwise the same values whichever rank reduced them.
// - Errors (a failed barrier: a peer died) are Status values naming the rank.
//
// Threading: the thread that created it calls it; the reduction and copies use OpenMP threads.
#pragma once

#include <cstdint>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::dist {

class SymmetricBuffer {
 public:
  virtual ~SymmetricBuffer() = default;
  // This rank's part: bytes() long, 64-byte aligned, zero-filled at creation.
  virtual void* data() = 0;
  virtual int64_t bytes() const = 0;

  // f32 elements [first, first + n) of every part := their sum over ranks.
  virtual Status all_reduce_sum_f32(int64_t first, int64_t n) = 0;
  // f32 elements of this rank's slice [first + offset(rank), + counts[rank]) := their sum over
  // ranks; the other slices of this rank's part are left as they were.
  virtual Status reduce_scatter_sum_f32(int64_t first, const std::vector<int64_t>& counts) = 0;
  // Bytes: rank r's slice [first + offset(r), + counts[r]) of part r is copied into every part.
  virtual Status all_gather_bytes(int64_t first, const std::vector<int64_t>& counts) = 0;
};

// Checks a collective's range against a buffer of `bytes` bytes (elem_size: 4 for f32, 1 for
// bytes); the message names the collective and the rank.
Status check_symmetric_range(const char* call, int rank, int world, int64_t bytes, int64_t elem_size, int64_t first,
                             const std::vector<int64_t>& counts);

// out[i] = ((parts[0][i] + parts[1][i]) + ...) for i < n; `out` may be one of the parts.
void sum_parts_f32(float* out, const float* const* parts, int nparts, int64_t n);

}  // namespace lmt::dist
