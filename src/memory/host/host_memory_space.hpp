// Host memory: 64-byte aligned (a cache line, and every SIMD width in use). Everything runs at once
// on the calling thread.
#pragma once

#include "memory/host/host_space_kernels.hpp"
#include "memory/memory_space.hpp"

namespace fsdp {

class HostMemorySpace : public MemorySpace {
 public:
  const char* name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  Residence residence() const override { return {}; }
  void deallocate(void* p, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  Kernels& kernels() override { return kernels_; }

 protected:
  void* allocate_bytes(std::size_t bytes) override;

 private:
  HostSpaceKernels kernels_;
};

}  // namespace fsdp
