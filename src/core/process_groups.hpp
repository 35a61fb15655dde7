// The communicator splits that define FSDP's groups (paper, section "Hybrid Sharding"):
// shard groups S_1..S_{W/F} of F ranks each, and replicate groups R_1..R_F of the ranks that hold
// the same shard. Ranks are ordered node by node, so a shard group stays inside a node whenever F
// divides the ranks per node.
#pragma once

#include <mpi.h>

#include "base/group.hpp"

namespace fsdp {

enum class Strategy : int { FullShard = 0, HybridShard = 1, NoShard = 2 };

// How the ranks of a communicator sit on nodes. Identical on every rank.
struct Topology {
  int world_size = 1;
  int node_count = 1;
  int ranks_per_node = 1;  // 0 when nodes hold different numbers of ranks
  int largest_node = 1;    // ranks on the most populated node
  int position = 0;        // this rank's index when ranks are ordered by (node, rank in node)
  int node_rank = 0;       // this rank's index on its node (picks its GPU)
  int node_leader = 0;     // the lowest world rank on this rank's node: names the node
};

// Collective over `comm`.
Topology discover_topology(MPI_Comm comm);

// F for a strategy and a requested factor (0: the strategy's default); throws InvalidArgument
// when F does not fit. Local, and gives the same answer on every rank for the same inputs.
int resolve_sharding_factor(Strategy strategy, int requested, const Topology& topo);

// How many pieces a rank's trainable block is cut into (core/flat_layout.hpp): one per replica
// with hybrid sharding, which HFSDP updates one piece per replica; else 1.
inline int layout_pieces(Strategy strategy, int replicas) {
  return strategy == Strategy::HybridShard ? replicas : 1;
}

class ProcessGroups {
 public:
  // Takes ownership of `world` (a communicator the caller duplicated) once construction succeeds.
  // Collective over it. `node_ranks` (hpz_node_ranks, core/secondary_partition.hpp): the size of
  // the node group to make, 0 for none.
  ProcessGroups(MPI_Comm world, const Topology& topo, int sharding_factor, int node_ranks = 0);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  const Group& world() const { return world_; }
  const Group& shard() const { return shard_; }
  const Group& replicate() const { return replicate_; }
  // hpZ: the shard group's members on this node, in shard-rank order; MPI_COMM_NULL when hpZ is
  // off or means nothing (the shard group inside one node).
  const Group& node_shard() const { return node_shard_; }

 private:
  Group world_, shard_, replicate_, node_shard_;
};

}  // namespace fsdp
