// A memory space that hands out distinct addresses and no memory. The planner runs the library's
// own buffer pool and scratch (runtime/buffer_pool.hpp, runtime/scratch.hpp) over it, with the
// library's MemoryAccounting, so what a plan counts as allocated, cached, freed and peaking is
// what their rules do, not a copy of those rules. Nothing may read, write or compute on it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/error.hpp"
#include "memory/memory_space.hpp"

namespace fsdp::plan {

class LedgerSpace final : public MemorySpace {
 public:
  const char* name() const override { return "plan"; }
  bool host_accessible() const override { return false; }
  Residence residence() const override { no_bytes(); }
  void deallocate(void*, std::size_t) override {}
  void zero(void*, std::size_t) override { no_bytes(); }
  void copy(void*, const void*, std::size_t) override { no_bytes(); }
  Kernels& kernels() override { no_bytes(); }

 protected:
  // One past the previous allocation (even of 0 bytes), so every address is distinct.
  void* allocate_bytes(std::size_t bytes) override {
    const uintptr_t at = next_;
    next_ += bytes + 1;
    return reinterpret_cast<void*>(at);
  }

 private:
  [[noreturn]] static void no_bytes() {
    fail(Errc::Internal, "the planner's memory space holds no bytes to touch");
  }
  uintptr_t next_ = 4096;
};

}  // namespace fsdp::plan
