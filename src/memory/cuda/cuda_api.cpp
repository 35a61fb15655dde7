// cuda_api.hpp in a build with CUDA (NCCL optional: FSDP_HAVE_NCCL).
#include "memory/cuda/cuda_api.hpp"

#include <cuda.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include "memory/cuda/cuda_check.hpp"
#include "memory/cuda/cuda_memory_space.hpp"
#include "memory/cuda/device_guard.hpp"
#include "memory/cuda/pinned_memory_space.hpp"

namespace fsdp::cuda {

bool built_with_cuda() {
  return true;
}

bool built_with_nccl() {
#if defined(FSDP_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent, looked up once through the runtime (no link to libcuda).
struct ContextCalls {
  CUresult (*get)(CUcontext*) = nullptr;
  CUresult (*set)(CUcontext) = nullptr;
  ContextCalls() {
    cudaDriverEntryPointQueryResult found{};
    void* fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      get = reinterpret_cast<CUresult (*)(CUcontext*)>(fn);
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      set = reinterpret_cast<CUresult (*)(CUcontext)>(fn);
    (void)cudaGetLastError();
  }
};

const ContextCalls& context_calls() {
  static const ContextCalls calls;
  return calls;
}

}  // namespace

bool thread_has_context() noexcept {
  const ContextCalls& c = context_calls();
  CUcontext ctx = nullptr;
  if (!c.get || !c.set || c.get(&ctx) != CUDA_SUCCESS) return true;  // unknown: as before
  return ctx != nullptr;
}

void clear_thread_context() noexcept {
  if (const ContextCalls& c = context_calls(); c.set) c.set(nullptr);
}

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {  // no driver, or no device
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::array<unsigned char, 16> device_uuid(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::array<unsigned char, 16> id{};
  for (std::size_t i = 0; i < id.size(); ++i)
    id[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
  return id;
}

std::unique_ptr<MemorySpace> make_device_memory(int device) {
  return std::make_unique<CudaMemorySpace>(device);
}

std::unique_ptr<MemorySpace> make_pinned_memory(int device) {
  return std::make_unique<PinnedMemorySpace>(device);
}

void set_caller_stream(MemorySpace& device_memory, void* stream) {
  static_cast<CudaMemorySpace&>(device_memory).set_caller_stream(static_cast<cudaStream_t>(stream));
}

// Whether the MPI library moves CUDA device memory itself, asked of the library at run time:
// MPICH (4.0 and later) through MPIX_GPU_query_support, Open MPI through its CUDA extension's
// MPIX_Query_cuda_support (mpi-ext.h; present whether or not that build has CUDA support, which
// the call then reports). Any other MPI: no, and device buffers are staged through the host.
bool mpi_supports_cuda() {
#if defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported;
#elif defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace fsdp::cuda
