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
  void scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count, double divisor,
              Store store) override;
  void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t count) override;
};

}  // namespace fsdp
