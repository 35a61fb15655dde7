// The memory spaces and transport of a context, chosen from its placement (fsdp_config_t
// memory_space, device, cpu_offload, transport):
//
//   host memory           buffers = shards = host,        transport = MPI
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
  MemorySpace& buffers() { return *buffers_; }
  // Parameter shards, gradient shards, optimizer state.
  MemorySpace& shards() { return shards_ ? *shards_ : *buffers_; }
  // Plain host memory, for what the CPU fills before it goes to the shards (initialization).
  MemorySpace& host() { return *host_; }
  Transport& transport() { return device_transport_ ? *device_transport_ : *host_transport_; }
  Scratch& transport_scratch() { return *transport_scratch_; }
  // CPU offload: the CPU is about to read or write shards the device may still be writing (the
  // reduce epilogue) or reading (an unshard).
  void before_cpu_touches_shards() {
    if (shards_) buffers_->synchronize();
  }
  uint64_t allocation_calls() const {
    uint64_t n = 0;
    for (const auto* m : {host_.get(), buffers_.get(), shards_.get(), staging_.get()})
      if (m) n += m->allocation_calls();
    return n;
  }

 private:
  Placement placement_;
  std::unique_ptr<MemorySpace> host_, buffers_, shards_, staging_;
  std::unique_ptr<Scratch> transport_scratch_;
  std::unique_ptr<Transport> host_transport_, device_transport_;
};

}  // namespace fsdp
