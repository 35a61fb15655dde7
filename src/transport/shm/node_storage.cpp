#include "transport/shm/node_storage.hpp"

namespace fsdp::shm {

void* NodeStorage::place(Lease& home, std::size_t bytes, bool eligible) {
  if (!resident_ || !eligible) return nullptr;
  auto r = std::make_unique<Resident>();
  resident_->acquire(bytes, r->block);  // collective over the team
  set_hold(home, std::move(r));
  set_in_place(home);
  return home.data();
}

void NodeStorage::do_claim(Lease& lease, std::size_t bytes) {
  if (lease.in_place()) return;  // the block is the unit's for life
  if (!hold(lease)) set_hold(lease, std::make_unique<Slot>());
  slots_.claim(static_cast<Slot*>(hold(lease))->slot, bytes);
}

void* NodeStorage::acquire(Lease& lease) {
  if (lease.in_place()) {
    // Nothing to move: the node's ranks meet once, after which each one's shard writes so far
    // are visible to all (the barrier orders them); then the block is sealed (debug mode).
    team_.barrier();
    resident_->seal(static_cast<Resident*>(hold(lease))->block);
    return nullptr;
  }
  // The slot is chosen with the node's other ranks, hence in collective order.
  NodeSlots::Lease& slot = static_cast<Slot*>(hold(lease))->slot;
  slots_.acquire(bytes(lease), slot);
  return slot.data();
}

void NodeStorage::seal(Lease& lease) {
  if (!lease.in_place()) slots_.seal(static_cast<Slot*>(hold(lease))->slot);
}

void NodeStorage::do_release(Lease& lease) {
  if (lease.in_place())
    static_cast<Resident*>(hold(lease))->block.unseal();  // the shard stays: the block is its home
  else
    static_cast<Slot*>(hold(lease))->slot.reset();
}

}  // namespace fsdp::shm
