// The ranks of one process group that share a node's memory (a "team"), in group-rank order, and
// what they coordinate through: a control block in a shared window holding a barrier, one mailbox
// per rank. For a group spanning nodes, `cross` links the ranks
// holding the same team index on every node (the inter-node part of each collective goes there,
// over MPI).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/error.hpp"
#include "base/group.hpp"
#include "transport/shm/shared_window.hpp"

namespace fsdp::shm {

// What one rank tells the others during a collective. Written before a barrier, read after it,
// and not rewritten before the next barrier every rank passes after reading.
struct alignas(64) Mailbox {
  uint64_t segment = 0;     // where this rank's operand is: window index in its arena...
  uint64_t offset = 0;      // ...and byte offset in its segment
  uint64_t grow_bytes = 0;  // arena growth this rank needs before the operand can be shared
  uint64_t held_slots = 0;  // NodeSlots this rank holds, as a bit mask by slot index
};

class NodeTeam {
 public:
  // Collective over `group`: ranks with the same `node_key` (Topology::node_leader) form a team.
  // Throws Errc::Unsupported when the teams of the group differ in size (the hierarchical
  // collectives need one team index per rank on every node).
  NodeTeam(const Group& group, int node_key);
  ~NodeTeam();
  NodeTeam(const NodeTeam&) = delete;
  NodeTeam& operator=(const NodeTeam&) = delete;

  const Group& group() const { return group_; }  // the process group this team is part of
  MPI_Comm comm() const { return team_.comm; }
  int rank() const { return team_.rank; }
  int size() const { return team_.size; }
  // Ranks with this rank's team index, one per node, in group-rank order.
  const Group& cross() const { return cross_; }
  // Group rank of each cross member, by cross rank (where their blocks sit in a full buffer).
  const std::vector<int>& cross_group_ranks() const { return cross_group_ranks_; }

  // Every team rank has arrived. Spins (up to 50 us when the node has a core per team rank, a
  // few hundred pauses otherwise), then sleeps on a futex. Throws Errc::Aborted once abort() was
  // called.
  void barrier();
  Mailbox& mailbox(int team_rank);
  // fsdp_abort (Errc::Aborted) or the watchdog (Errc::Timeout): barriers in progress or to come
  // throw `why`; windows are leaked, not freed.
  void abort(Errc why);
  bool aborted() const { return aborted_.load(std::memory_order_acquire) != 0; }

  struct Control;

 private:
  Group group_, team_, cross_;
  std::vector<int> cross_group_ranks_;
  std::unique_ptr<SharedWindow> window_;
  Control* control_ = nullptr;
  static constexpr unsigned kShortSpins = 256;
  static constexpr long kLongSpinNs = 50'000;
  long spin_ns_ = 0;             // how long a waiter spins before sleeping
  std::atomic<int> aborted_{0};  // 0, or the Errc barriers throw
};

}  // namespace fsdp::shm
