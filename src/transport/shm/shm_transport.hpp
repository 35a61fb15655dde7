// Collectives of one shard group through the node's shared memory (fsdp_transport_t
// FSDP_TRANSPORT_SHM). A DelegatingTransport: its delegate, MPI, carries the inter-node steps,
// every other group (but hpZ's node group, the shard group's ranks on this node, whose all-gather
// into a node copy is the team's), all-reduces, and what node shared memory cannot hold
// (Fallback).
//
// All-gather: the output is a node slot (NodeSlots; its lease says so, Where::Kind::NodeCopy),
// so each rank writes only its own block and the team synchronizes once; a node holds one
// unsharded copy and moves 1/F of the bytes an MPI_Allgather moves. Across nodes, each team rank
// then all-gathers the blocks of its team index from the other nodes (MPI_Allgatherv in place).
//
// Reduce-scatter: every rank's full gradient is in its shared arena (its lease says where), so
// each rank sums its own block across the team straight out of the others' buffers, in the order
// the MPI ring adds them (start after this rank, end with it): on one node the result is bitwise
// the MPI transport's ring. Across nodes, each team rank sums the blocks of its team index on
// every node into scratch, then reduce-scatters them over MPI with the others of its team index.
#pragma once

#include <memory>

#include "base/memory_accounting.hpp"
#include "runtime/scratch.hpp"
#include "transport/delegating_transport.hpp"
#include "transport/shm/fallback.hpp"
#include "transport/shm/node_slots.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/resident_arena.hpp"
#include "transport/shm/shared_arena.hpp"

namespace fsdp::shm {

class ShmTransport final : public DelegatingTransport {
 public:
  // Collective over `shard`. `delegate`: the MPI transport (the table's delegate entry) that
  // carries what this one does not, what node shared memory cannot hold included when `tried`
  // (Fallback). `protect_slots`: debug mode, see NodeSlots.
  ShmTransport(const Group& shard, int node_key, Transport& delegate, MemoryAccounting& accounting,
               bool protect_slots, bool tried);
  ~ShmTransport() override;
  const char* name() const override { return "shm"; }
  void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                  const Group& g) override;
  // Into a node copy, each rank writes its own block's pieces at their places (the dim-0
  // layout costs no copy more than the flat one); across nodes, each team rank receives the
  // blocks of its team index into scratch and places them. Any other output: the delegate's.
  bool places_pieces(const Group& g) override {
    return carries(g) || DelegatingTransport::places_pieces(g);
  }
  void all_gather_pieces(const void* shard, const Located& full, std::size_t count, DType t,
                         const Group& g, const std::vector<BlockPiece>& pieces) override;
  void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override;
  // all_reduce: the delegate's (DelegatingTransport).
  // Both abort the team's waits, then the delegate's.
  void abort() override;
  void interrupt_for_timeout() override;

  NodeTeam& team() const { return *team_; }
  NodeSlots& slots() { return *slots_; }
  // Zero-copy storage (FSDP_TRANSPORT_SHM_ZERO_COPY): a unit's node-shared block for its whole
  // life, its ranks' shards at their places; nullptr when the shard group spans nodes.
  ResidentArena* resident_storage() { return team_->cross().size == 1 ? resident_.get() : nullptr; }
  HostMemorySpace& arena_memory() const { return *arena_memory_; }
  uint64_t allocation_calls() const;
  void release_scratch() {
    sums_->release();
    chunk_->release();
  }

 private:
  bool carries(const Group& g) const { return g.comm == team_->group().comm; }
  // `g` has the team's ranks in the team's order (hpZ's node group: its members share the node
  // copy, so an all-gather over it is the team's writes and one barrier). Cached per communicator.
  bool is_team(const Group& g);
  MPI_Comm team_comm_seen_ = MPI_COMM_NULL;
  bool team_comm_is_team_ = false;
  // Block `offset` (bytes into every rank's buffer) summed over the team in ring order, through
  // the epilogue.
  void team_sum(const std::vector<const char*>& x, std::size_t offset, std::size_t count, DType t,
                const ReduceEpilogue& e);

  // Gradients of at least this many bytes (a growth that size failed) go to the delegate without
  // another attempt (Fallback).
  std::size_t mpi_from_bytes_ = SIZE_MAX;
  std::unique_ptr<NodeTeam> team_;
  std::unique_ptr<Fallback> fallback_;
  std::unique_ptr<NodeSlots> slots_;
  std::unique_ptr<ResidentArena> resident_;
  std::unique_ptr<SharedArena> arena_;
  std::unique_ptr<ArenaMemorySpace> arena_memory_;
  HostMemorySpace scratch_memory_;
  std::unique_ptr<Scratch> sums_, chunk_;  // inter-node partial sums; ring-order accumulator
};

}  // namespace fsdp::shm
