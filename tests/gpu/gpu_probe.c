/* What the CUDA runtime sees, for share/scripts/gpu-check.sh: one line
 *   devices=<n> driver=<version> runtime=<version> error=<cudaGetErrorName or none>
 * The count honours CUDA_VISIBLE_DEVICES (and counts MIG instances as the runtime does). A driver
 * too old for the runtime, or a broken installation, is an error here rather than "no device".
 * Exit status 0 when the runtime answered, 1 otherwise. */
#include <cuda_runtime.h>
#include <stdio.h>

int main(void) {
  int n = 0, driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t e = cudaGetDeviceCount(&n);
  printf("devices=%d driver=%d runtime=%d error=%s\n", e == cudaSuccess ? n : 0, driver, runtime,
         e == cudaSuccess ? "none" : cudaGetErrorName(e));
  fflush(stdout);
  if (e != cudaSuccess) fprintf(stderr, "cudaGetDeviceCount: %s\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
