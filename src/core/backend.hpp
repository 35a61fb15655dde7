// The memory spaces, transport and unsharded storage of a context, chosen from its placement
// (fsdp_config_t memory_space, device, cpu_offload, transport). Core sees them only through this
// interface: the backend is built by the factory its creator hands Context::create
// (placement/select.hpp's make_backend, the one place that knows the concrete transports):
//
//   host memory           buffers = shards = host,        transport = MPI,  storage = pool
//   host memory, shm      full gradients in the node-shared arena, shards = host,
//                         transport = shared memory + MPI, storage = node slots (+ zero-copy)
//   CUDA, NCCL            buffers = shards = device,      transport = NCCL on the device stream
//   CUDA, MPI             buffers = shards = device,      transport = MPI through pinned staging
//   CUDA + CPU offload    buffers = device, shards = pinned host (optimizer on the CPU)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "base/memory_accounting.hpp"
#include "core/memory_and_transport.hpp"
#include "core/process_groups.hpp"
#include "memory/memory_space.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/unsharded_storage.hpp"
#include "transport/transport.hpp"
#include "transport/transport_options.hpp"

namespace fsdp {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const Placement& placement() const = 0;
  // Full gradients and partial sums (the pool's buffers).
  virtual MemorySpace& buffers() = 0;
  // Parameter shards, gradient shards, optimizer state.
  virtual MemorySpace& shards() = 0;
  // Plain host memory, for what the CPU fills before it goes to the shards (initialization).
  virtual MemorySpace& host() = 0;
  virtual Transport& transport() = 0;
  // Where unsharded parameters live while a unit is unsharded.
  virtual UnshardedStorage& unsharded() = 0;
  // Buffers on loan: full gradients, and unsharded parameters where the storage is the pool.
  virtual BufferPool& pool() = 0;
  // Frees cached buffers and communication scratch (fsdp_trim_pool).
  virtual void trim() = 0;
  // CPU offload: the CPU is about to read or write shards the device may still be writing (the
  // reduce epilogue) or reading (an unshard).
  virtual void before_cpu_touches_shards() = 0;
  // Calls to the allocators of every memory space (fsdp_memory_stats).
  virtual uint64_t allocation_calls() const = 0;
};

// Builds a context's backend once its process groups exist. Collective over the world group: a
// rank that cannot set up its device makes every rank throw (agreement), and the transport chosen
// is the same everywhere.
using BackendFactory = std::function<std::unique_ptr<Backend>(
    const PlacementRequest& request, const MpiTransportOptions& mpi, const ProcessGroups& groups,
    const Topology& topo, MemoryAccounting& accounting)>;

}  // namespace fsdp
