#include "memory/cuda/pinned_memory_space.hpp"

#include <string>

#include "memory/cuda/cuda_check.hpp"
#include "memory/cuda/device_guard.hpp"

namespace fsdp::cuda {

void* PinnedMemorySpace::allocate_bytes(std::size_t bytes) {
  DeviceGuard device(device_);
  void* p = nullptr;
  // Portable: pinned for every device; mapped: device kernels may read and write it in place.
  const cudaError_t e =
      cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail(Errc::OutOfMemory, "cudaHostAlloc of " + std::to_string(bytes) +
                                " bytes of pinned host memory failed (check ulimit -l)");
  }
  check(e, "cudaHostAlloc");
  return p;
}

void PinnedMemorySpace::deallocate(void* p, std::size_t) {
  cudaFreeHost(p);
}

}  // namespace fsdp::cuda
