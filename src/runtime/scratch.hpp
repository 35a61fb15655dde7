// A grow-only buffer for communication scratch (ring pieces, partial sums): kept for the context's
// life so steady-state collectives allocate nothing, and apart from the pool so it cannot evict
// or be evicted by parameter and gradient buffers.
#pragma once

#include <cstddef>

#include "base/memory_accounting.hpp"
#include "memory/memory_space.hpp"

namespace fsdp {

class Scratch {
 public:
  Scratch(MemorySpace& memory, MemoryAccounting& accounting)
      : memory_(memory), accounting_(accounting) {}
  ~Scratch() { release(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::size_t capacity() const { return capacity_; }
  // At least `bytes`, contents undefined; valid until the next get() or release().
  void* get(std::size_t bytes) {
    if (bytes > capacity_) {
      void* p = memory_.allocate(bytes);
      release();
      data_ = p;
      capacity_ = bytes;
      accounting_.add(MemoryKind::Scratch, capacity_);
    }
    return data_;
  }

  void release() {
    if (!data_) return;
    memory_.deallocate(data_, capacity_);
    accounting_.sub(MemoryKind::Scratch, capacity_);
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  MemorySpace& memory_;
  MemoryAccounting& accounting_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace fsdp
