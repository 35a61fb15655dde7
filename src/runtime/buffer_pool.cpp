#include "runtime/buffer_pool.hpp"

namespace fsdp {
namespace {

MemoryKind accounted_as(int use) {
  return use == static_cast<int>(BufferPool::Use::Parameters) ? MemoryKind::Unsharded
                                                              : MemoryKind::FullGrad;
}

}  // namespace

BufferPool::Lease& BufferPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    use_ = o.use_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    capacity_ = o.capacity_;
    o.pool_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = o.capacity_ = 0;
  }
  return *this;
}

void BufferPool::Lease::reset() {
  if (data_) pool_->give_back(data_, capacity_, use_);
  pool_ = nullptr;
  data_ = nullptr;
  bytes_ = capacity_ = 0;
}

BufferPool::~BufferPool() {
  trim();
}

void BufferPool::free_cached(FreeList::iterator it) {
  memory_.deallocate(it->second.data, it->first);
  cached_[it->second.use] -= it->first;
  accounting_.sub(MemoryKind::PoolCached, it->first);
  free_.erase(it);
}

BufferPool::Lease BufferPool::acquire(std::size_t bytes, Use use) {
  const int u = static_cast<int>(use);
  if (bytes > largest_[u]) largest_[u] = bytes;
  Lease lease;
  auto fit = free_.lower_bound(bytes);  // the smallest large enough: served if it is no larger
  if (fit != free_.end() && fit->first <= largest_[u]) {  // than this use's largest request
    lease.capacity_ = fit->first;
    lease.data_ = fit->second.data;
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
    lease.data_ = memory_.allocate(bytes);
    lease.capacity_ = bytes;
  }
  accounting_.add(accounted_as(u), lease.capacity_);
  lease.use_ = u;
  lease.pool_ = this;
  lease.bytes_ = bytes;
  return lease;
}

void BufferPool::give_back(void* data, std::size_t capacity, int use) {
  accounting_.sub(accounted_as(use), capacity);
  if (!memory_.keep_in_pool(data)) {
    memory_.deallocate(data, capacity);
    return;
  }
  try {
    free_.emplace(capacity, Cached{data, use});
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
