// Checks of an MPI communicator argument, shared by the entry points that take one.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <string>

#include "base/environment.hpp"
#include "base/error.hpp"
#include "base/group.hpp"
#include "base/mpi_check.hpp"

namespace fsdp::capi {

// A process started as one of N by a launcher (Open MPI's mpiexec, MPICH's Hydra, srun) whose
// MPI_COMM_WORLD has one rank: the MPI library this process runs did not join the launcher's job
// (a program built against one MPI started by another's mpiexec, or srun without the PMI its MPI
// speaks), so every rank would train alone, silently.
inline void require_launcher_joined() {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const LauncherJob job = launcher_job();
  if (world != 1 || job.processes == 0) return;
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string library(version, static_cast<std::size_t>(std::max(length, 0)));
  library = library.substr(0, library.find_first_of("\r\n,"));
  std::replace(library.begin(), library.end(), '\t', ' ');  // MPICH's "Version:\t4.0.2"
  fail(Errc::Mpi, "this process was started as one of " + std::to_string(job.processes) + " by " +
                      job.launcher + " (" + job.variable + ") but MPI_COMM_WORLD has 1 rank: the "
                      "MPI it runs (" + library + ") did not join that launcher's job. Start it "
                      "with the mpiexec of the MPI it was built with, or give srun the PMI that "
                      "MPI speaks (--mpi=pmi2 or --mpi=pmix)");
}

// MPI initialized and not finalized, `comm` an intra-communicator, and the process part of the
// job its launcher started.
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
  require_launcher_joined();
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
