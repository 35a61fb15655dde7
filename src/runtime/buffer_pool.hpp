// The pool that unsharded parameter buffers, full gradient buffers and communication scratch come
// from and return to, so steady-state training allocates nothing.
//
// A request takes the smallest cached buffer that is large enough. When none is, every cached
// buffer is smaller than the request and of no use to it: they are freed first, then the request
// is allocated, so the memory held never exceeds what is on loan plus one buffer's worth (this is
// what makes the peak match FSDP's formula, K_low * max(psi_i) for one unsharded unit). A released
// buffer is cached, and then the smallest cached buffers are freed while the cache holds more than
// twice the largest buffer ever requested (a unit's parameters and its gradient). The pool thus
// converges to buffers of the largest unit, and a steady training loop allocates nothing.
#pragma once

#include <cstddef>
#include <map>

#include "base/memory_accounting.hpp"
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
    MemoryKind kind_ = MemoryKind::Unsharded;
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
  // `kind` is what the buffer is accounted as while on loan.
  Lease acquire(std::size_t bytes, MemoryKind kind);
  // Frees every cached buffer (not those on loan).
  void trim();

 private:
  void give_back(void* data, std::size_t capacity, MemoryKind kind);

  MemorySpace& memory_;
  MemoryAccounting& accounting_;
  std::multimap<std::size_t, void*> free_;  // by capacity
  std::size_t cached_bytes_ = 0;
  std::size_t largest_request_ = 0;
};

}  // namespace fsdp
