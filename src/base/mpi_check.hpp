// MPI return codes to exceptions. The library's communicators use MPI_ERRORS_RETURN, so a failed
// MPI call reaches the caller as FSDP_ERR_MPI with MPI's own message instead of aborting the job.
#pragma once

#include <mpi.h>

#include <string>

#include "base/error.hpp"

namespace fsdp {

inline void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  fail(Errc::Mpi, std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

}  // namespace fsdp
