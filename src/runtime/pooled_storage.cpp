#include "runtime/pooled_storage.hpp"

namespace fsdp {

void PooledStorage::do_claim(Lease& lease, std::size_t bytes) {
  if (!hold(lease)) set_hold(lease, std::make_unique<Pooled>());
  static_cast<Pooled*>(hold(lease))->buffer = pool_.acquire(bytes, BufferPool::Use::Parameters);
}

void PooledStorage::do_release(Lease& lease) {
  static_cast<Pooled*>(hold(lease))->buffer.reset();
}

}  // namespace fsdp
