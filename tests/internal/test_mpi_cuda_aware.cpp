// CUDA-aware MPI detection (memory/cuda: mpi_supports_cuda, which decides whether device buffers
// go to MPI as they are or through host staging) against what the MPI's own tool says of its
// build, passed in by check_mpi_cuda_aware.sh: "yes" or "no" (Open MPI's ompi_info
// mpi_built_with_cuda_support, MPICH's mpichversion --with-cuda).
//   test_mpi_cuda_aware yes|no
#include <mpi.h>

#include <cstdio>
#include <cstring>

#include "memory/cuda/cuda_api.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const bool expected = argc > 1 && std::strcmp(argv[1], "yes") == 0;
  const bool found = fsdp::cuda::mpi_supports_cuda();
  std::printf("CUDA-aware MPI: the library finds %s, the MPI's tool says %s\n",
              found ? "yes" : "no", expected ? "yes" : "no");
  MPI_Finalize();
  return found == expected ? 0 : 1;
}
