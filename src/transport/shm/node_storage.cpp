#include "transport/shm/node_storage.hpp"

namespace fsdp::shm {

void* NodeStorage::place(Claim& home, std::size_t bytes, bool eligible) {
  if (!resident_ || !eligible) return nullptr;
  resident_->acquire(bytes, buffer(home));  // collective over the team
  set_in_place(home);
  return home.data();
}

void NodeStorage::do_claim(Claim& claim, std::size_t bytes) {
  if (claim.in_place()) return;  // the block is the unit's for life
  // Each rank is charged its share, so memory stats summed over a node give the node's memory.
  charged(claim) = bytes / static_cast<std::size_t>(team_.size());
  accounting_.add(MemoryKind::Unsharded, charged(claim));
}

Located NodeStorage::acquire(Claim& claim) {
  Lease& lease = buffer(claim);
  if (claim.in_place()) {
    // Nothing to move: the node's ranks meet once, after which each one's shard writes so far
    // are visible to all (the barrier orders them); then the block is sealed (debug mode).
    team_.barrier();
    resident_->seal(lease);
    return Located();
  }
  // The slot is chosen with the node's other ranks, hence in collective order.
  slots_.acquire(bytes(claim), lease);
  if (lease.located().where.kind == Where::Kind::Private) {
    // The fallback's private buffer: this rank holds all of it, not a share of the node's copy.
    accounting_.add(MemoryKind::Unsharded, bytes(claim) - charged(claim));
    charged(claim) = bytes(claim);
  }
  return lease.located();
}

void NodeStorage::seal(Claim& claim) {
  if (!claim.in_place()) slots_.seal(buffer(claim));
}

void NodeStorage::do_release(Claim& claim) {
  if (claim.in_place()) {
    resident_->unseal(buffer(claim));  // the shard stays: the block is its home
    return;
  }
  buffer(claim).reset();
  accounting_.sub(MemoryKind::Unsharded, charged(claim));
  charged(claim) = 0;
}

}  // namespace fsdp::shm
