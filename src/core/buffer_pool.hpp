// The pool that unsharded parameter buffers, full gradient buffers and communication scratch come
// from and return to, so steady-state training allocates nothing. Buffers are cached by exact
// size: the units of a model repeat a handful of sizes.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

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
    std::size_t bytes() const { return bytes_; }
    explicit operator bool() const { return data_ != nullptr; }

   private:
    friend class BufferPool;
    BufferPool* pool_ = nullptr;
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
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
  void give_back(void* data, std::size_t bytes);

  MemorySpace& memory_;
  MemoryAccounting& accounting_;
  std::map<std::size_t, std::vector<void*>> free_;
};

}  // namespace fsdp
