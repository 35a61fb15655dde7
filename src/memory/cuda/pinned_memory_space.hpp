// Pinned (page-locked) host memory for CPU offload and MPI staging: the CPU computes on it like
// any host memory, and the GPU copies to and from it at full PCIe speed and reads or writes it
// directly (unified addressing), without an intermediate copy.
#pragma once

#include "memory/host/host_memory_space.hpp"

namespace fsdp::cuda {

class PinnedMemorySpace final : public HostMemorySpace {
 public:
  explicit PinnedMemorySpace(int device) : device_(device) {}
  const char* name() const override { return "cuda-pinned-host"; }
  Residence residence() const override { return {Residence::Kind::PinnedHost, 0}; }
  void deallocate(void* p, std::size_t bytes) override;

 protected:
  void* allocate_bytes(std::size_t bytes) override;

 private:
  const int device_;
};

}  // namespace fsdp::cuda
