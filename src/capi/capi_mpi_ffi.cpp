// MPI start-up and shut-down for FFI callers that have no MPI bindings of their own (Python
// without mpi4py, Julia, ...): MPI's constants (MPI_COMM_WORLD, MPI_THREAD_MULTIPLE) are
// macros whose values differ between implementations, so such callers cannot spell them.
#include <atomic>

#include "base/mpi_check.hpp"
#include "capi/arguments.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "fsdp.h"

using fsdp::Errc;
using fsdp::fail;

namespace {
// Whether fsdp_mpi_init started MPI: only then does fsdp_mpi_finalize stop it.
std::atomic<bool> started_by_us{false};
}  // namespace

namespace fsdp::capi::body {

void fsdp_mpi_init(int thread_multiple, int* provided_multiple, int* world_fcomm) {
  if (thread_multiple != 0 && thread_multiple != 1)
    fail(Errc::InvalidArgument, "thread_multiple: must be 0 or 1");
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) fail(Errc::Mpi, "MPI was already finalized; it cannot be initialized again");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int required = thread_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    fsdp::mpi_check(MPI_Init_thread(nullptr, nullptr, required, &provided), "MPI_Init_thread");
    started_by_us = true;
  } else {
    fsdp::mpi_check(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided_multiple) *provided_multiple = provided == MPI_THREAD_MULTIPLE ? 1 : 0;
  *world_fcomm = static_cast<int>(MPI_Comm_c2f(MPI_COMM_WORLD));
}

void fsdp_mpi_finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!started_by_us || finalized) return;  // the caller owns MPI, or it is already down
  fsdp::mpi_check(MPI_Finalize(), "MPI_Finalize");
  started_by_us = false;
}

}  // namespace fsdp::capi::body
