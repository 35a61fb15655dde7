// The CUDA and NCCL side of the library, behind functions the core calls whatever the build. With
// FSDP_ENABLE_CUDA off (or no toolkit) they come from cuda_stubs.cpp and report no device, so the
// core carries no #ifdef.
#pragma once

#include <memory>

#include "core/process_groups.hpp"
#include "memory/memory_space.hpp"
#include "transport/transport.hpp"

namespace fsdp::cuda {

bool built_with_cuda();
bool built_with_nccl();
// Devices this process can use; 0 without CUDA, a driver or a device. Never throws.
int device_count() noexcept;
// Makes `device` current on the calling thread. Throws Errc::Cuda.
void use_device(int device);

// Device memory of `device`, with its own stream. Throws Errc::Cuda.
std::unique_ptr<MemorySpace> make_device_memory(int device);
// Pinned (page-locked) host memory, addressable by the device; kernels run on the CPU.
std::unique_ptr<MemorySpace> make_pinned_memory(int device);
// `device_memory` must come from make_device_memory: the caller's cudaStream_t (nullptr: the
// legacy default stream).
void set_caller_stream(MemorySpace& device_memory, void* stream);

// NCCL communicators for the shard and replicate groups (rank 0 of each group makes the unique id
// and broadcasts it over the group's MPI communicator); operations run on device_memory's stream.
// Collective over both groups. Throws Errc::Unsupported without NCCL, Errc::Nccl on failure.
std::unique_ptr<Transport> make_nccl_transport(MemorySpace& device_memory,
                                               const ProcessGroups& groups);

// Whether the MPI library reports that it takes CUDA device pointers (MPIX_GPU_query_support).
bool mpi_supports_cuda();

}  // namespace fsdp::cuda
