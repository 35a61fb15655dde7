// Unsharded parameters in the node's shared memory (the shared-memory transport): one copy per
// node instead of one per rank. A unit whose shards can stay in place (zero-copy storage,
// FSDP_TRANSPORT_SHM_ZERO_COPY on one node) holds its block of the ResidentArena for life and its
// unshard is a barrier; any other unit claims a node slot (NodeSlots) when its unshard starts,
// which the all-gather fills. Either way the claim's lease says where the copy is, which is how
// the transport knows to all-gather it in place.
#pragma once

#include "base/memory_accounting.hpp"
#include "runtime/unsharded_storage.hpp"
#include "transport/shm/node_slots.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/resident_arena.hpp"

namespace fsdp::shm {

class NodeStorage final : public UnshardedStorage {
 public:
  // `resident`: zero-copy storage, or nullptr (node slots for every unit).
  NodeStorage(NodeTeam& team, NodeSlots& slots, ResidentArena* resident,
              MemoryAccounting& accounting)
      : team_(team), slots_(slots), resident_(resident), accounting_(accounting) {}
  void* place(Claim& home, std::size_t bytes, bool eligible) override;
  Located acquire(Claim& claim) override;
  void seal(Claim& claim) override;

 private:
  void do_claim(Claim& claim, std::size_t bytes) override;
  void do_release(Claim& claim) override;

  NodeTeam& team_;
  NodeSlots& slots_;
  ResidentArena* resident_;
  MemoryAccounting& accounting_;
};

}  // namespace fsdp::shm
