// The lenders' bookkeeping, each against rules written here from their headers' contracts:
//   - FreeRanges (transport/shm/free_ranges.hpp): first fit at the lowest offset, freed neighbours
//     merged;
//   - BufferPool (runtime/buffer_pool.hpp): the smallest cached buffer that fits and is no larger
//     than the use's largest request; smaller buffers of the same use freed on a miss; at most
//     twice the largest request cached per use; trim frees the cache; what is on loan and cached
//     in the memory statistics;
//   - Lease (runtime/lease.hpp): given back exactly once, moves carry the loan, and where the
//     buffer is comes with it from the memory space that allocated it.
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "base/memory_accounting.hpp"
#include "check.hpp"
#include "memory/host/host_memory_space.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/lease.hpp"
#include "transport/shm/free_ranges.hpp"

using namespace fsdp;

namespace {

// Host memory that keeps the set of live allocations and says each is in "window" 7 at an
// offset equal to its ordinal, so a lease's Where can be traced to the allocation it came from.
class TracingMemory final : public HostMemorySpace {
 public:
  std::set<const void*> live;
  void deallocate(void* p, std::size_t bytes) override {
    live.erase(p);
    HostMemorySpace::deallocate(p, bytes);
  }
  Where where(const void* p) const override {
    return Where{Where::Kind::NodeArena, 7, static_cast<uint64_t>(ordinal_of(p))};
  }

 protected:
  void* allocate_bytes(std::size_t bytes) override {
    void* p = HostMemorySpace::allocate_bytes(bytes);
    live.insert(p);
    ordinals_[p] = next_++;
    return p;
  }

 private:
  std::size_t ordinal_of(const void* p) const {
    auto it = ordinals_.find(p);
    return it == ordinals_.end() ? 0 : it->second;
  }
  std::map<const void*, std::size_t> ordinals_;
  std::size_t next_ = 1;
};

void free_ranges() {
  shm::FreeRanges r;
  check(!r.take(1), "FreeRanges: nothing free, nothing taken");
  r.give(0, 100);
  check(r.take(30) == std::optional<std::size_t>(0), "FreeRanges: first fit at 0");
  check(r.take(30) == std::optional<std::size_t>(30), "FreeRanges: next at 30");
  check(r.take(50) == std::nullopt, "FreeRanges: 40 left, 50 does not fit");
  check(r.take(40) == std::optional<std::size_t>(60), "FreeRanges: the rest at 60");
  r.give(30, 30);  // [30, 60) free
  r.give(0, 30);   // merged with it: [0, 60)
  check(r.take(60) == std::optional<std::size_t>(0), "FreeRanges: neighbours merged (left)");
  r.give(60, 40);
  r.give(0, 60);  // [0, 100) again, merged on the right
  check(r.take(100) == std::optional<std::size_t>(0), "FreeRanges: neighbours merged (right)");
  r.give(10, 10);
  r.give(50, 40);
  check(r.take(20) == std::optional<std::size_t>(50), "FreeRanges: the lowest range that fits");
  check(r.take(10) == std::optional<std::size_t>(10), "FreeRanges: an exact fit");
}

void buffer_pool() {
  TracingMemory memory;
  MemoryAccounting acc;
  using U = BufferPool::Use;
  {
    BufferPool pool(memory, acc);
    Lease a = pool.acquire(1000, U::Gradients);
    check(a && a.bytes() == 1000 && a.capacity() == 1000, "pool: allocated exactly");
    check(acc.bytes(MemoryKind::FullGrad) == 1000, "pool: a gradient on loan is counted");
    check(a.located().where.kind == Where::Kind::NodeArena && a.located().where.window == 7 &&
              a.located().where.offset == 1,
          "pool: the lease says where its memory space put it");
    void* first = a.data();
    a.reset();
    check(!a && acc.bytes(MemoryKind::FullGrad) == 0 && acc.bytes(MemoryKind::PoolCached) == 1000,
          "pool: given back, cached");
    Lease b = pool.acquire(600, U::Gradients);  // fits, no larger than the use's largest
    check(b.data() == first && b.capacity() == 1000 && b.bytes() == 600,
          "pool: the cached buffer serves a smaller request of its use");
    check(b.located().where.offset == 1, "pool: a reused buffer keeps its place");
    check(memory.allocation_calls() == 1, "pool: reuse allocates nothing");
    b.reset();
    // A use whose largest request is smaller is not served by a larger buffer.
    Lease p = pool.acquire(600, U::Parameters);
    check(p.data() != first && p.capacity() == 600, "pool: no buffer beyond a use's largest");
    check(acc.bytes(MemoryKind::Unsharded) == 600, "pool: parameters counted as unsharded");
    // Moving a lease moves the loan; it is given back once.
    Lease q = std::move(p);
    check(!p && q && q.capacity() == 600, "lease: moved");
    q = Lease();
    check(acc.bytes(MemoryKind::Unsharded) == 0 && acc.bytes(MemoryKind::PoolCached) == 1600,
          "lease: given back once, by the move's target");
    // A miss frees the use's smaller cached buffers first (the 600 of Parameters stays: another
    // use), then allocates exactly.
    Lease big = pool.acquire(2000, U::Gradients);
    check(big.capacity() == 2000, "pool: a miss allocates exactly");
    check(memory.live.count(first) == 0, "pool: the use's smaller cached buffer freed first");
    check(acc.bytes(MemoryKind::PoolCached) == 600, "pool: the other use's buffer stays cached");
    // At most twice the largest request cached per use: 2000 * 2 = 4000.
    Lease c1 = pool.acquire(2000, U::Gradients), c2 = pool.acquire(1500, U::Gradients);
    big.reset();
    c1.reset();
    check(acc.bytes(MemoryKind::PoolCached) == 600 + 4000, "pool: two of the largest kept");
    c2.reset();  // 5500 > 4000: the use's smallest go first, which is the 1500 just given back
    check(acc.bytes(MemoryKind::PoolCached) == 600 + 4000, "pool: the cap holds, smallest freed");
    pool.trim();
    check(acc.bytes(MemoryKind::PoolCached) == 0 && memory.live.empty(), "pool: trim frees all");
    Lease after = pool.acquire(100, U::Gradients);
    check(after.capacity() == 100, "pool: sizes forgotten by trim");
  }
  check(memory.live.empty(), "pool: nothing left once the pool and its leases are gone");
}

}  // namespace

int main() {
  free_ranges();
  buffer_pool();
  if (failures == 0) std::printf("leases: the lenders keep their rules\n");
  return failures == 0 ? 0 : 1;
}
