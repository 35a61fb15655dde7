// The CUDA and NCCL side of the library, behind functions the core calls whatever the build. With
// FSDP_ENABLE_CUDA off (or no toolkit) they come from cuda_stubs.cpp and report no device, so the
// core carries no #ifdef.
#pragma once

#include <array>
#include <memory>

#include "memory/memory_space.hpp"

namespace fsdp::cuda {

bool built_with_cuda();
bool built_with_nccl();
// Devices this process can use; 0 without CUDA, a driver or a device. Never throws.
int device_count() noexcept;
// The device's UUID (cudaDeviceProp::uuid), which names a GPU whatever its ordinal. Throws
// Errc::Cuda.
std::array<unsigned char, 16> device_uuid(int device);

// Device memory of `device`, with its own stream. Throws Errc::Cuda.
std::unique_ptr<MemorySpace> make_device_memory(int device);
// Pinned (page-locked) host memory, addressable by the device; kernels run on the CPU.
std::unique_ptr<MemorySpace> make_pinned_memory(int device);
// `device_memory` must come from make_device_memory: the caller's cudaStream_t (nullptr: the
// legacy default stream).
void set_caller_stream(MemorySpace& device_memory, void* stream);

// Whether the MPI library reports that it takes CUDA device pointers (MPIX_GPU_query_support).
bool mpi_supports_cuda();

}  // namespace fsdp::cuda
