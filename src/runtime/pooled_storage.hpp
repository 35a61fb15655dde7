// Unsharded parameters in buffers of the context's pool, private to each rank: the storage of
// every placement but the shared-memory transport's. The buffer is taken when the unshard starts
// and goes back to the pool at reshard.
#pragma once

#include "runtime/buffer_pool.hpp"
#include "runtime/unsharded_storage.hpp"

namespace fsdp {

class PooledStorage final : public UnshardedStorage {
 public:
  explicit PooledStorage(BufferPool& pool) : pool_(pool) {}
  void* acquire(Lease& lease) override { return lease.data(); }

 private:
  struct Pooled final : Hold {
    BufferPool::Lease buffer;
    void* data() const override { return buffer.data(); }
  };
  void do_claim(Lease& lease, std::size_t bytes) override;
  void do_release(Lease& lease) override;

  BufferPool& pool_;
};

}  // namespace fsdp
