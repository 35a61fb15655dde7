// One process group: a communicator the library owns, and this rank's place in it.
#pragma once

#include <mpi.h>

namespace fsdp {

struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

}  // namespace fsdp
