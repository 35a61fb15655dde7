#include "runtime/buffer_pool.hpp"

namespace fsdp {
namespace {

MemoryKind accounted_as(int use) {
  switch (static_cast<BufferPool::Use>(use)) {
    case BufferPool::Use::Parameters: return MemoryKind::Unsharded;
    case BufferPool::Use::Secondary: return MemoryKind::Secondary;
    default: return MemoryKind::FullGrad;
  }
}

}  // namespace

BufferPool::~BufferPool() {
  trim();
}

void BufferPool::free_cached(FreeList::iterator it) {
  memory_.deallocate(it->second.at.data, it->first);
  cached_[it->second.use] -= it->first;
  accounting_.sub(MemoryKind::PoolCached, it->first);
  free_.erase(it);
}

Lease BufferPool::acquire(std::size_t bytes, Use use) {
  const int u = static_cast<int>(use);
  if (bytes > largest_[u]) largest_[u] = bytes;
  Located at;
  std::size_t capacity = 0;
  auto fit = free_.lower_bound(bytes);  // the smallest large enough: served if it is no larger
  if (fit != free_.end() && fit->first <= largest_[u]) {  // than this use's largest request
    capacity = fit->first;
    at = fit->second.at;
    cached_[fit->second.use] -= fit->first;
    accounting_.sub(MemoryKind::PoolCached, fit->first);
    free_.erase(fit);
  } else {
    // This use's smaller cached buffers are of no use to it; other uses keep theirs.
    for (auto it = free_.begin(); it != free_.end() && it->first < bytes;)
      if (it->second.use == u)
        free_cached(it++);
      else
        ++it;
    at.data = memory_.allocate(bytes);
    at.where = memory_.where(at.data);
    capacity = bytes;
  }
  accounting_.add(accounted_as(u), capacity);
  Lease lease;
  lend(lease, at, bytes, capacity, static_cast<uintptr_t>(u));
  return lease;
}

void BufferPool::take_back(Lease& lease) noexcept {
  const int use = static_cast<int>(ticket(lease));
  const std::size_t capacity = lease.capacity();
  void* data = lease.data();
  accounting_.sub(accounted_as(use), capacity);
  if (!memory_.keep_in_pool(data)) {
    memory_.deallocate(data, capacity);
    return;
  }
  try {
    free_.emplace(capacity, Cached{lease.located(), use});
  } catch (...) {  // no memory to remember it: free it instead (called from destructors)
    memory_.deallocate(data, capacity);
    return;
  }
  cached_[use] += capacity;
  accounting_.add(MemoryKind::PoolCached, capacity);
  for (auto it = free_.begin(); cached_[use] > 2 * largest_[use] && it != free_.end();)
    if (it->second.use == use)  // this use's smallest first
      free_cached(it++);
    else
      ++it;
}

void BufferPool::trim() {
  while (!free_.empty()) free_cached(free_.begin());
  // The sizes seen so far go too: what is requested from here on sizes the pool again.
  for (std::size_t& l : largest_) l = 0;
}

}  // namespace fsdp
