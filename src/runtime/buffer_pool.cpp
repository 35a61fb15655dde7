#include "runtime/buffer_pool.hpp"

namespace fsdp {

BufferPool::Lease& BufferPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    kind_ = o.kind_;
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
  if (data_) pool_->give_back(data_, capacity_, kind_);
  pool_ = nullptr;
  data_ = nullptr;
  bytes_ = capacity_ = 0;
}

BufferPool::~BufferPool() {
  trim();
}

BufferPool::Lease BufferPool::acquire(std::size_t bytes, Use use) {
  const MemoryKind kind = use == Use::Parameters ? MemoryKind::Unsharded : MemoryKind::FullGrad;
  Lease lease;
  if (bytes > largest_request_) largest_request_ = bytes;
  std::size_t& largest = largest_[static_cast<int>(use)];
  if (bytes > largest) largest = bytes;
  auto fit = free_.lower_bound(bytes);
  if (fit != free_.end() && fit->first <= largest) {
    lease.capacity_ = fit->first;
    lease.data_ = fit->second;
    free_.erase(fit);
    cached_bytes_ -= lease.capacity_;
    accounting_.sub(MemoryKind::PoolCached, lease.capacity_);
  } else {
    // The smaller cached buffers are of no use to it; larger ones stay for their own use.
    while (!free_.empty() && free_.begin()->first < bytes) {
      auto smallest = free_.begin();
      memory_.deallocate(smallest->second, smallest->first);
      cached_bytes_ -= smallest->first;
      accounting_.sub(MemoryKind::PoolCached, smallest->first);
      free_.erase(smallest);
    }
    lease.data_ = memory_.allocate(bytes);
    lease.capacity_ = bytes;
  }
  accounting_.add(kind, lease.capacity_);
  lease.kind_ = kind;
  lease.pool_ = this;
  lease.bytes_ = bytes;
  return lease;
}

void BufferPool::give_back(void* data, std::size_t capacity, MemoryKind kind) {
  accounting_.sub(kind, capacity);
  if (!memory_.keep_in_pool(data)) {
    memory_.deallocate(data, capacity);
    return;
  }
  try {
    free_.emplace(capacity, data);
  } catch (...) {  // no memory to remember it: free it instead (called from destructors)
    memory_.deallocate(data, capacity);
    return;
  }
  cached_bytes_ += capacity;
  accounting_.add(MemoryKind::PoolCached, capacity);
  while (cached_bytes_ > 2 * largest_request_) {
    auto smallest = free_.begin();
    memory_.deallocate(smallest->second, smallest->first);
    cached_bytes_ -= smallest->first;
    accounting_.sub(MemoryKind::PoolCached, smallest->first);
    free_.erase(smallest);
  }
}

void BufferPool::trim() {
  for (auto& [capacity, data] : free_) {
    memory_.deallocate(data, capacity);
    accounting_.sub(MemoryKind::PoolCached, capacity);
  }
  free_.clear();
  cached_bytes_ = 0;
  // The sizes seen so far go too: what is requested from here on sizes the pool again.
  largest_request_ = 0;
  for (std::size_t& l : largest_) l = 0;
}

}  // namespace fsdp
