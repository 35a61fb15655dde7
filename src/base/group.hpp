// One process group: a communicator the library owns, and this rank's place in it.
#pragma once

#include <mpi.h>

namespace fsdp {

struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

// Frees the group's communicator and leaves it MPI_COMM_NULL. After MPI_Finalize nothing can be
// freed; the memory went with MPI.
inline void free_group(Group& g) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g.comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&g.comm);
  g.comm = MPI_COMM_NULL;
}

}  // namespace fsdp
