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
  Located acquire(Claim& claim) override { return buffer(claim).located(); }

 private:
  void do_claim(Claim& claim, std::size_t bytes) override {
    buffer(claim) = pool_.acquire(bytes, BufferPool::Use::Parameters);
  }
  void do_release(Claim& claim) override { buffer(claim).reset(); }

  BufferPool& pool_;
};

}  // namespace fsdp
