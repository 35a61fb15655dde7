// The pool that unsharded parameter buffers, full gradient buffers and communication scratch come
// from and return to, so steady-state training allocates nothing.
//
// Each request says what the buffer is for (Use): unsharded parameters, full gradients, or their
// reduce_dtype copies. A request takes the smallest cached buffer that is large enough and no
// larger than the largest request ever made for the same use, so a buffer is never charged more
// than FSDP's formula charges that use (K_low * max(psi_i) for unsharded parameters): with
// bfloat16 parameters and float32 reduction, the float32 copies never serve the bfloat16
// parameters. When no cached buffer serves, the cached ones smaller than the request are of no
// use to it and freed first, then the request is allocated exactly, so the memory held never
// exceeds what is on loan plus what other uses keep cached. A released buffer is cached, and then
// the smallest cached buffers are freed while the cache holds more than twice the largest buffer
// ever requested (a unit's parameters and its gradient). The pool thus converges to buffers of
// the largest unit for each use, and a steady training loop allocates nothing.
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

  enum class Use { Parameters, Gradients, ReduceCopies, Count };
  // Contents are not initialized. Throws Errc::OutOfMemory. Accounted while on loan as unsharded
  // parameters (Parameters) or full gradients (the others).
  Lease acquire(std::size_t bytes, Use use);
  // Frees every cached buffer (not those on loan) and forgets the sizes requested so far.
  void trim();

 private:
  void give_back(void* data, std::size_t capacity, MemoryKind kind);

  MemorySpace& memory_;
  MemoryAccounting& accounting_;
  std::multimap<std::size_t, void*> free_;  // by capacity
  std::size_t cached_bytes_ = 0;
  std::size_t largest_request_ = 0;
  std::size_t largest_[static_cast<int>(Use::Count)] = {};  // per use
};

}  // namespace fsdp
