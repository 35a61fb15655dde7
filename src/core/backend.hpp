// The memory spaces and transport of a context, chosen from its placement (fsdp_config_t
// memory_space, device, cpu_offload, transport):
//
//   host memory           buffers = shards = host,        transport = MPI
//   host memory, shm      unsharded buffers in node slots, gradients in the node-shared arena,
//                         shards = host,                  transport = shared memory + MPI
//   CUDA, NCCL            buffers = shards = device,      transport = NCCL on the device stream
//   CUDA, MPI             buffers = shards = device,      transport = MPI through pinned staging
//   CUDA + CPU offload    buffers = device, shards = pinned host (optimizer on the CPU)
#pragma once

#include <memory>

#include "core/memory_accounting.hpp"
#include "core/placement.hpp"
#include "core/process_groups.hpp"
#include "core/scratch.hpp"
#include "memory/memory_space.hpp"
#include "transport/mpi/mpi_transport.hpp"
#include "transport/shm/shm_transport.hpp"

namespace fsdp {

class Backend {
 public:
  // Collective over the world group: a rank that cannot set up its device makes every rank
  // throw (agreement), and the transport chosen is the same everywhere.
  Backend(const PlacementRequest& request, const MpiTransportOptions& mpi,
          const ProcessGroups& groups, const Topology& topo, MemoryAccounting& accounting);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const Placement& placement() const { return placement_; }
  // Unsharded parameters, full gradients, partial sums.
  MemorySpace& buffers() { return shm_ ? shm_->arena_memory() : *buffers_; }
  // Parameter shards, gradient shards, optimizer state.
  MemorySpace& shards() { return shards_ ? *shards_ : *buffers_; }
  // Plain host memory, for what the CPU fills before it goes to the shards (initialization).
  MemorySpace& host() { return *host_; }
  Transport& transport() {
    if (device_transport_) return *device_transport_;
    if (shm_) return *shm_;
    return *host_transport_;
  }
  // The node's shared unsharded buffers (shared-memory transport), or nullptr.
  shm::NodeSlots* node_slots() { return shm_ ? &shm_->slots() : nullptr; }
  // With FSDP_TRANSPORT_SHM_ZERO_COPY and a shard group inside one node, the transport whose node
  // slots hold zero-copy units' shards for good; nullptr otherwise.
  shm::ShmTransport* zero_copy() {
    return shm_ && placement_.transport == TransportKind::ShmZeroCopy && shm_->resident_storage()
               ? shm_.get()
               : nullptr;
  }
  // Frees communication scratch (fsdp_trim_pool).
  void release_scratch() {
    transport_scratch_->release();
    if (shm_) shm_->release_scratch();
  }
  // CPU offload: the CPU is about to read or write shards the device may still be writing (the
  // reduce epilogue) or reading (an unshard).
  void before_cpu_touches_shards() {
    if (shards_) buffers_->synchronize();
  }
  uint64_t allocation_calls() const {
    uint64_t n = 0;
    for (const auto* m : {host_.get(), buffers_.get(), shards_.get(), staging_.get()})
      if (m) n += m->allocation_calls();
    if (shm_) n += shm_->allocation_calls() + shm_->arena_memory().allocation_calls();
    return n;
  }

 private:
  void choose_host_transport(const PlacementRequest& request, const ProcessGroups& groups,
                             const Topology& topo, MemoryAccounting& accounting);

  Placement placement_;
  std::unique_ptr<MemorySpace> host_, buffers_, shards_, staging_;
  std::unique_ptr<Scratch> transport_scratch_;
  std::unique_ptr<MpiTransport> host_transport_;
  std::unique_ptr<Transport> device_transport_;
  std::unique_ptr<shm::ShmTransport> shm_;
};

}  // namespace fsdp
