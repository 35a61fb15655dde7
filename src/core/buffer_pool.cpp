#include "core/buffer_pool.hpp"

namespace fsdp {

BufferPool::Lease& BufferPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.pool_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void BufferPool::Lease::reset() {
  if (data_) pool_->give_back(data_, bytes_);
  pool_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

BufferPool::~BufferPool() { trim(); }

BufferPool::Lease BufferPool::acquire(std::size_t bytes) {
  Lease lease;
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    lease.data_ = it->second.back();
    it->second.pop_back();
    accounting_.sub(MemoryKind::PoolCached, bytes);
  } else {
    lease.data_ = memory_.allocate(bytes);
  }
  accounting_.add(MemoryKind::Unsharded, bytes);
  lease.pool_ = this;
  lease.bytes_ = bytes;
  return lease;
}

void BufferPool::give_back(void* data, std::size_t bytes) {
  accounting_.sub(MemoryKind::Unsharded, bytes);
  try {
    free_[bytes].push_back(data);
    accounting_.add(MemoryKind::PoolCached, bytes);
  } catch (...) {  // no memory to remember it: free it instead (called from destructors)
    memory_.deallocate(data, bytes);
  }
}

void BufferPool::trim() {
  for (auto& [bytes, list] : free_) {
    for (void* p : list) {
      memory_.deallocate(p, bytes);
      accounting_.sub(MemoryKind::PoolCached, bytes);
    }
  }
  free_.clear();
}

}  // namespace fsdp
