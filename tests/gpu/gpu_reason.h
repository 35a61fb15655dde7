/* Why the CUDA runtime sees no device, printed by rank 0 before a GPU test's skip line: the
 * library's fsdp_cuda_device_count reports 0 for every runtime error, so without this a driver
 * too old for the runtime (cudaErrorInsufficientDriver) would read like a machine without a GPU.
 * (make gpu-check names the error in its verdict too: share/scripts/gpu_verdict.py.) */
#ifndef FSDP_TEST_GPU_REASON_H
#define FSDP_TEST_GPU_REASON_H

#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>

static inline void gpu_print_runtime_error(void) {
  int n = 0, rank = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (e != cudaSuccess && rank == 0)
    printf("CUDA runtime: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
  (void)cudaGetLastError();
}

#endif
