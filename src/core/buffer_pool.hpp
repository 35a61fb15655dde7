// The pool that unsharded parameter buffers, full gradient buffers and communication scratch come
// from and return to, so steady-state training allocates nothing.
//
// A request takes the smallest cached buffer that is large enough, else allocates. A released
// buffer is cached, and then the smallest cached buffers are freed while the cache holds more than
// twice the largest buffer ever requested (a unit's parameters and its gradient). Caching every
// size would, for a model of differently sized units, add up to a whole unsharded replica; this
// way the pool converges to about two buffers of the largest unit, the bound in FSDP's memory
// formula, and a steady training loop allocates nothing.
#pragma once

#include <cstddef>
#include <map>

#include "core/memory_accounting.hpp"
#include "memory/memory_space.hpp"

namespace fsdp {

class BufferPool {
 public:
  // A buffer on loan; returns itself to the pool when destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease() { reset(); }
    void reset();
    void* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }        // as requested
    std::size_t capacity() const { return capacity_; }  // as allocated, >= bytes()
    explicit operator bool() const { return data_ != nullptr; }

   private:
    friend class BufferPool;
    BufferPool* pool_ = nullptr;
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
    std::size_t capacity_ = 0;
  };

  BufferPool(MemorySpace& memory, MemoryAccounting& accounting)
      : memory_(memory), accounting_(accounting) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // Contents are not initialized. Throws Errc::OutOfMemory.
  Lease acquire(std::size_t bytes);
  // Frees every cached buffer (not those on loan).
  void trim();

 private:
  void give_back(void* data, std::size_t capacity);

  MemorySpace& memory_;
  MemoryAccounting& accounting_;
  std::multimap<std::size_t, void*> free_;  // by capacity
  std::size_t cached_bytes_ = 0;
  std::size_t largest_request_ = 0;
};

}  // namespace fsdp
