// Host memory: 64-byte aligned (a cache line, and every SIMD width in use).
#pragma once

#include "memory/memory_space.hpp"

namespace fsdp {

class HostMemorySpace final : public MemorySpace {
 public:
  const char* name() const override { return "host"; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void scaled(void* out, const void* x, std::size_t count, DType t, double divisor,
              Store store) override;
};

}  // namespace fsdp
