// The NCCL transport, behind a function every build has: nccl_transport.cpp with NCCL,
// nccl_absent.cpp without it. Only the backend's selection (placement/select.cpp) calls it.
#pragma once

#include <memory>

#include "base/group.hpp"
#include "memory/memory_space.hpp"
#include "transport/transport.hpp"

namespace fsdp::cuda {

// NCCL communicators for the shard and replicate groups (rank 0 of each group makes the unique id
// and broadcasts it over the group's MPI communicator); operations run on device_memory's stream.
// `device_memory` must come from cuda::make_device_memory. Collective over both groups. Throws
// Errc::Unsupported without NCCL, Errc::Nccl on failure.
std::unique_ptr<Transport> make_nccl_transport(MemorySpace& device_memory, const Group& shard,
                                               const Group& replicate);

}  // namespace fsdp::cuda
