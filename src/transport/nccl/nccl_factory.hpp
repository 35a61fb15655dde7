// The NCCL transport, behind a function every build has: nccl_transport.cpp with NCCL,
// nccl_absent.cpp without it. Only the backend's selection (placement/select.cpp) calls it.
#pragma once

#include <memory>
#include <vector>

#include "base/group.hpp"
#include "memory/memory_space.hpp"
#include "transport/transport.hpp"

namespace fsdp::cuda {

// NCCL communicators for `groups` (the shard and replicate groups, and hpZ's node group where it
// has one), in that order, the same on every rank: rank 0 of each group makes the unique id and
// broadcasts it over the group's MPI communicator; a group of one rank, or without a
// communicator, gets none. Operations run on device_memory's stream. `device_memory` must come
// from cuda::make_device_memory. Collective over each group in turn. Throws Errc::Unsupported
// without NCCL, Errc::Nccl on failure.
std::unique_ptr<Transport> make_nccl_transport(MemorySpace& device_memory,
                                               const std::vector<const Group*>& groups);

}  // namespace fsdp::cuda
