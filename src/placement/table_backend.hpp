// The backend make_backend returns (core/backend.hpp): the placement's memory and the transport
// stack the transport table chose, with the context's buffer pool and unsharded storage over them.
#pragma once

#include <memory>

#include "core/backend.hpp"
#include "placement/transport_table.hpp"

namespace fsdp {

// The placement's memory: plain host memory, or the CUDA device (and pinned host memory for the
// shards under CPU offload), set up by make_backend (select.cpp).
struct PlacementMemory {
  std::unique_ptr<MemorySpace> buffers, offload;  // offload: the shards' memory, or nullptr
  int device = -1;
};

// The placement's memory and the transport stack the table chose; every member is set.
class TableBackend final : public Backend {
 public:
  TableBackend(const Placement& placement, std::unique_ptr<MemorySpace> host,
               PlacementMemory memory, Chosen chosen, MemoryAccounting& accounting)
      : placement_(placement),
        host_(std::move(host)),
        memory_(std::move(memory)),
        stack_(std::move(chosen.stack)),
        pool_(std::make_unique<BufferPool>(stack_->buffers(), accounting)),
        storage_(stack_->make_storage(*pool_)) {
    placement_.transport = chosen.entry->resolved;
  }
  ~TableBackend() override;

  const Placement& placement() const override { return placement_; }
  MemorySpace& buffers() override { return stack_->buffers(); }
  MemorySpace& shards() override { return memory_.offload ? *memory_.offload : *memory_.buffers; }
  MemorySpace& host() override { return *host_; }
  Transport& transport() override { return stack_->transport(); }
  UnshardedStorage& unsharded() override { return *storage_; }
  BufferPool& pool() override { return *pool_; }
  void trim() override {
    memory_.buffers->synchronize();  // no queued device copy may still use what is freed
    pool_->trim();
    stack_->trim();
  }
  void before_cpu_touches_shards() override {
    if (memory_.offload) memory_.buffers->synchronize();
  }
  uint64_t allocation_calls() const override {
    uint64_t n = host_->allocation_calls() + memory_.buffers->allocation_calls();
    if (memory_.offload) n += memory_.offload->allocation_calls();
    return n + stack_->allocation_calls();
  }

 private:
  Placement placement_;
  std::unique_ptr<MemorySpace> host_;
  PlacementMemory memory_;
  std::unique_ptr<TransportStack> stack_;
  std::unique_ptr<BufferPool> pool_;  // after the memory spaces: freed before them
  std::unique_ptr<UnshardedStorage> storage_;
};

}  // namespace fsdp
