// Zero-copy storage (FSDP_TRANSPORT_SHM_ZERO_COPY): one block of node-shared memory per unit,
// holding the unit's unsharded copy for the unit's whole life (rank r's shard is block r of it).
//
// Blocks are carved out of shared chunks (MPI-3 shared windows) inside unit creation, which every
// team rank makes in the same order: the same first fit over the same free ranges gives every
// rank the same block without exchanging anything. Destroying a unit is local: each rank adds one
// to the block's release count, kept in shared memory at the head of its chunk. A block is free
// again once the count says every team rank let it go; counts are read at the next creation,
// between two barriers, so that every rank sees the same counts and makes the same choice.
//
// Chunks are at least kChunkBytes (one chunk per larger unit) because windows are scarce: MPICH
// 4.0 aborts after about 2,000 windows and communicators per process (context ids), so a window
// per unit would cap the units a node can hold.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/lease.hpp"
#include "transport/shm/free_ranges.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/shared_window.hpp"

namespace fsdp::shm {

class ResidentArena final : public Lender {
 public:
  // `protect`: debug mode, as NodeSlots.
  ResidentArena(NodeTeam& team, bool protect) : team_(team), protect_(protect) {}
  ~ResidentArena();
  ResidentArena(const ResidentArena&) = delete;
  ResidentArena& operator=(const ResidentArena&) = delete;

  // Collective over the team (unit creation): fills `lease` (empty) with a block of at least
  // `bytes`, the unit's for life (Where::Kind::NodeCopy). Letting it go is local: the block is
  // free once every team rank let it go. Throws Errc::OutOfMemory on every team rank when a chunk
  // cannot be made.
  void acquire(std::size_t bytes, Lease& lease);
  // As NodeSlots: after the team's barrier of an unshard (debug mode: read-only, checksummed).
  void seal(Lease& lease);
  // Debug mode: writable again at reshard, the block staying the unit's.
  void unseal(Lease& lease) { Lender::unseal(lease); }
  uint64_t allocation_calls() const { return allocation_calls_.load(std::memory_order_relaxed); }

  static constexpr std::size_t kChunkBytes = std::size_t(16) << 20;

 private:
  struct Record {  // a block carved from a chunk; its release count is counts[index]
    std::size_t offset = 0, span = 0;
    uint32_t base = 0;  // the count when the block was handed out
    bool used = false;
  };
  struct Chunk {
    std::unique_ptr<SharedWindow> window;
    FreeRanges free;
    std::vector<Record> records;      // at most as many as the head page holds counts
    std::atomic<uint32_t>* counts{};  // in the chunk's head page, shared by the team
  };
  // The ticket is the block's release count, in its chunk.
  void take_back(Lease& lease) noexcept override;
  void collect();  // returns the blocks every team rank let go to their chunks' free ranges
  bool carve(Chunk& c, std::size_t span, std::size_t* record);
  void add_chunk(std::size_t span);  // collective

  NodeTeam& team_;
  const bool protect_;
  // Identical on every team rank. Only acquire changes it, inside unit creation, a collective
  // call; a lease's release touches its count alone.
  std::vector<Chunk> chunks_;
  std::atomic<uint64_t> allocation_calls_{0};
};

}  // namespace fsdp::shm
