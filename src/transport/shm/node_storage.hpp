// Unsharded parameters in the node's shared memory (the shared-memory transport): one copy per
// node instead of one per rank. A unit whose shards can stay in place (zero-copy storage,
// FSDP_TRANSPORT_SHM_ZERO_COPY on one node) holds its block of the ResidentArena for life and its
// unshard is a barrier; any other unit claims a node slot (NodeSlots) when its unshard starts,
// which the all-gather fills.
#pragma once

#include "runtime/unsharded_storage.hpp"
#include "transport/shm/node_slots.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/resident_arena.hpp"

namespace fsdp::shm {

class NodeStorage final : public UnshardedStorage {
 public:
  // `resident`: zero-copy storage, or nullptr (node slots for every unit).
  NodeStorage(NodeTeam& team, NodeSlots& slots, ResidentArena* resident)
      : team_(team), slots_(slots), resident_(resident) {}
  void* place(Lease& home, std::size_t bytes, bool eligible) override;
  void* acquire(Lease& lease) override;
  void seal(Lease& lease) override;

 private:
  struct Slot final : Hold {
    NodeSlots::Lease slot;
    void* data() const override { return slot.data(); }
    bool intact() const override { return slot.intact(); }
  };
  struct Resident final : Hold {
    ResidentArena::Lease block;
    void* data() const override { return block.data(); }
    bool intact() const override { return block.intact(); }
  };
  void do_claim(Lease& lease, std::size_t bytes) override;
  void do_release(Lease& lease) override;

  NodeTeam& team_;
  NodeSlots& slots_;
  ResidentArena* resident_;
};

}  // namespace fsdp::shm
