// CUDA runtime errors as the core's errors: FSDP_ERR_CUDA with CUDA's own text, and
// FSDP_ERR_OUT_OF_MEMORY for a failed allocation.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "base/error.hpp"

namespace fsdp::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clears a non-sticky error so later calls do not report it again
  fail(e == cudaErrorMemoryAllocation ? Errc::OutOfMemory : Errc::Cuda,
       std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

}  // namespace fsdp::cuda
