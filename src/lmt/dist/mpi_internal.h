// Internal to lmt_dist: helpers shared by the MPI implementations (includes mpi.h, unlike the
// public headers).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "lmt/base/status.h"
#include "lmt/dist/symmetric_buffer.h"

namespace lmt::dist {

// "rank R/W: " of MPI_COMM_WORLD, for error messages.
std::string rank_prefix();
// Ok for MPI_SUCCESS, else kInternal naming the rank, the call and MPI's error text.
Status mpi_status(int rc, const char* call);
// A SymmetricBuffer over an MPI-3 shared-memory window of the ranks of `comm` (collective over
// it; part r belongs to rank r of `comm`). kUnimplemented when those ranks span several nodes (the
// caller then uses message passing).
StatusOr<std::unique_ptr<SymmetricBuffer>> allocate_mpi_symmetric(MPI_Comm comm, int64_t bytes);

}  // namespace lmt::dist
