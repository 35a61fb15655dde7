// What one rank communicates over a training step (plan/training_step.hpp).
//
// Calls and bytes are per unit operation, as the trace records them (diag/trace.hpp): an
// unshard is one all-gather of the unit's unsharded buffer (padded, param_dtype), whatever the
// group size and however many sections it gathers; a reduce is one reduce-scatter of its full
// gradient in reduce_dtype (padded, trainable section) and, with replicas (hybrid, no-shard
// over several ranks), one all-reduce of the shard group's partial sum (reduce_dtype) across
// replicas; with HFSDP a reduce-scatter of it instead, and after the optimizer's update of each
// unit one all-gather of its trainable block (storage dtype) across replicas. These do not
// depend on the transport. With hpZ an unshard that reads the node's secondary partitions
// (training_step.hpp's mark_secondaries) is a node-local all-gather instead: the same buffer over
// the R ranks of the shard group on this node.
//
// The split between intra-node and inter-node bytes is a model, not a measurement: each
// collective over a group of n > 1 ranks (ordered by position, as ProcessGroups orders them) runs
// as a ring, where a rank sends to the next member of its group (the last to the first):
// (n-1)/n of the buffer for an all-gather or a reduce-scatter, 2(n-1)/n of it (rounded down) for
// an all-reduce. Those bytes count as inter-node when that next member is on another node (ranks
// are numbered node by node, ranks_per_node to a node), else as intra-node; a group of one rank
// sends nothing. So intra_node_bytes + inter_node_bytes is what the rank sends.
#pragma once

#include <cstddef>

#include "plan/plan_job.hpp"
#include "plan/plan_model.hpp"

namespace fsdp::plan {

struct TrafficPlan {
  std::size_t all_gather_bytes = 0, all_gather_calls = 0;
  std::size_t reduce_scatter_bytes = 0, reduce_scatter_calls = 0;
  std::size_t all_reduce_bytes = 0, all_reduce_calls = 0;
  std::size_t intra_node_bytes = 0, inter_node_bytes = 0;
  std::size_t replica_reduce_scatter_bytes = 0, replica_reduce_scatter_calls = 0;  // HFSDP
  std::size_t replica_all_gather_bytes = 0, replica_all_gather_calls = 0;          // HFSDP
  std::size_t node_all_gather_bytes = 0, node_all_gather_calls = 0;                // hpZ
};

// Throws what place_rank, planned_units and training_step throw.
TrafficPlan plan_traffic(const PlanModel& model, const PlanJob& job, int rank);

}  // namespace fsdp::plan
