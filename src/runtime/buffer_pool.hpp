// The pool that unsharded parameter buffers, full gradient buffers and communication scratch come
// from and return to, so steady-state training allocates nothing.
//
// Each request says what the buffer is for (Use): unsharded parameters, full gradients, or their
// reduce_dtype copies. A request takes the smallest cached buffer that is large enough and no
// larger than the largest request ever made for the same use, so a buffer is never charged more
// than FSDP's formula charges that use (K_low * max(psi_i) for unsharded parameters): with
// bfloat16 parameters and float32 reduction, the float32 copies never serve the bfloat16
// parameters. Buffers of one size serve every use whose requests they fit (float32 parameters
// and gradients share them).
//
// A released buffer is cached under the use it served. Each use keeps at most twice its largest
// request cached (a unit's buffer and the next one's), its smallest buffers freed first. When no
// cached buffer serves a request, the cached buffers of its use smaller than the request are of
// no use to it and freed first, then the request is allocated exactly: so for one use at a time
// (unshard and reshard) the memory held never exceeds what is on loan plus one buffer, and the
// peak meets FSDP's formula. The pool thus converges to buffers of the largest unit for each use,
// and a steady training loop allocates nothing, whatever the dtypes and frozen sections.
#pragma once

#include <cstddef>
#include <map>

#include "base/memory_accounting.hpp"
#include "memory/memory_space.hpp"
#include "runtime/lease.hpp"

namespace fsdp {

class BufferPool final : public Lender {
 public:
  BufferPool(MemorySpace& memory, MemoryAccounting& accounting)
      : memory_(memory), accounting_(accounting) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  enum class Use { Parameters, Gradients, ReduceCopies, Secondary, Count };
  // Contents are not initialized. Throws Errc::OutOfMemory. Accounted while on loan as unsharded
  // parameters (Parameters), secondary partitions (Secondary: hpZ) or full gradients (the
  // others). The lease says where the buffer is
  // (the memory space's answer, asked once when the buffer is allocated).
  Lease acquire(std::size_t bytes, Use use);
  // Frees every cached buffer (not those on loan) and forgets the sizes requested so far.
  void trim();

 private:
  static constexpr int kUses = static_cast<int>(Use::Count);
  struct Cached {
    Located at;
    int use;  // the use it last served
  };
  using FreeList = std::multimap<std::size_t, Cached>;  // by capacity
  void take_back(Lease& lease) noexcept override;       // the lease's ticket is its use
  void free_cached(FreeList::iterator it);

  MemorySpace& memory_;
  MemoryAccounting& accounting_;
  FreeList free_;
  std::size_t cached_[kUses] = {};   // bytes cached per use
  std::size_t largest_[kUses] = {};  // the largest request per use
};

}  // namespace fsdp
