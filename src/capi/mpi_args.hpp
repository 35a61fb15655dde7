// Checks of an MPI communicator argument, shared by the entry points that take one.
#pragma once

#include <mpi.h>

#include "base/error.hpp"
#include "base/group.hpp"
#include "base/mpi_check.hpp"

namespace fsdp::capi {

// MPI initialized and not finalized, and `comm` an intra-communicator.
inline void require_usable_mpi(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    fail(Errc::Mpi, "MPI is not initialized (call MPI_Init before fsdp_init) or already finalized");
  if (comm == MPI_COMM_NULL) fail(Errc::InvalidArgument, "comm: MPI_COMM_NULL");
  int inter = 0;
  fsdp::mpi_check(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
  if (inter) fail(Errc::InvalidArgument, "comm: an inter-communicator; pass an intra-communicator");
}

// A duplicate of the caller's `comm` for a call that needs no context (checkpoint checks,
// safetensors interchange): its own tag space, and errors returned, not fatal. The caller frees it
// (free_group).
inline Group duplicate_caller_comm(MPI_Comm comm) {
  Group g;
  fsdp::mpi_check(MPI_Comm_dup(comm, &g.comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g.comm, &g.rank);
  MPI_Comm_size(g.comm, &g.size);
  return g;
}

}  // namespace fsdp::capi
