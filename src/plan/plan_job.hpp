// A job to plan for (doc/planning-model.md): the options its fsdp_init would get (the config, then
// the FSDP_* environment, as fsdp_init reads them), the world's shape, and the optimizer that
// steps every unit; and the units such a job would create from a PlanModel, laid out and resolved
// by the rules the library applies when it creates them.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "core/context_options.hpp"
#include "core/flat_layout.hpp"
#include "core/precision.hpp"
#include "core/process_groups.hpp"
#include "core/unit_bytes.hpp"
#include "optim/optimizer.hpp"
#include "plan/plan_model.hpp"

namespace fsdp::plan {

struct PlanOptimizer {
  OptimizerKind kind = OptimizerKind::AdamW;
  HyperParams hyperparams;  // the one group over every parameter
};

struct PlanJob {
  ContextOptions options;
  int world_size = 1;
  int ranks_per_node = 1;  // divides world_size; ranks are numbered node by node
  std::optional<PlanOptimizer> optimizer;
  bool prefetch_forward = false, prefetch_backward = false;  // fsdp_set_prefetch
  // What a rank's forward keeps for backward (plan/activations.hpp).
  int batch = 1;                          // micro-batch per rank, in sequences
  int sequence = 0;                       // tokens per sequence; 0: the model's max_sequence
  bool activation_checkpointing = false;  // only each layer's input kept; recomputed in backward
  std::size_t activation_bytes_per_layer = 0;  // the caller's figure; 0: the estimate
  // Steps planned: with prefetch, the first records the unshard order the second prefetches by;
  // with hpZ, the second reuses the secondaries the first left in the pool (the steady state).
  int steps() const { return prefetch_forward || prefetch_backward || options.hpz ? 2 : 1; }
};

// Where a rank sits: its position (ranks in node-major order, as discover_topology numbers them;
// a plan's rank is its position), its node, and its shard and replicate groups as
// ProcessGroups forms them (shard group p / F of F consecutive positions, replicate group p % F).
struct RankPlace {
  int position = 0;
  int node = 0;
  int sharding_factor = 1;  // F: the shard group's size
  int replicas = 1;         // W / F: the replicate group's size
};

// The job's topology as discover_topology would report it.
Topology job_topology(const PlanJob& job);
// Throws InvalidArgument naming the field: world_size < 1, ranks_per_node not dividing it, a
// sharding factor the strategy refuses (resolve_sharding_factor), `rank` outside the world.
RankPlace place_rank(const PlanJob& job, int rank);

// hpZ's R for the job (core/secondary_partition.hpp's hpz_node_ranks): the ranks of a shard group
// on each node when secondaries are kept, else 0. Throws what hpz_node_ranks throws.
int node_ranks(const PlanJob& job);

// A unit of the model as the job would create it.
struct PlannedUnit {
  FlatLayout layout;
  Precision precision;
  UnitBytes bytes() const { return {layout, precision}; }
  bool has_grad() const { return layout.grad_shard_numel() > 0; }
};

// Throws InvalidArgument naming the unit for a precision its parameters cannot take, or State for
// a model without units.
std::vector<PlannedUnit> planned_units(const PlanModel& model, const PlanJob& job);

}  // namespace fsdp::plan
