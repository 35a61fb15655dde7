// make_backend: the backend factory capi hands Context::create. It sets up the placement's memory
// (host, or the CUDA device and its pinned memory), then walks the transport table
// (transport_table.hpp) for the transport and what comes with it.
#pragma once

#include <memory>

#include "core/backend.hpp"

namespace fsdp {

// A BackendFactory (core/backend.hpp). Collective over the world group.
std::unique_ptr<Backend> make_backend(const PlacementRequest& request,
                                      const MpiTransportOptions& mpi, const ProcessGroups& groups,
                                      const Topology& topo, MemoryAccounting& accounting);

}  // namespace fsdp
