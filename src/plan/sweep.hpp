// The configurations of a job that fit a memory budget, fastest first (fsdp_plan_sweep,
// fsdp-plan --sweep; doc/planning.md). The enumeration lives here, once, for every caller.
//
// Varied: the sharding (full; hybrid with each factor F, 1 < F < world, that divides the world
// and is a multiple or a divisor of ranks_per_node; none), the param dtype (float32, bfloat16),
// activation checkpointing (off, on), CPU offload (off, on; only for a job in CUDA memory) and
// the batch (1, 2, 4, ... up to the largest that fits). Everything else is the job's as given.
// A configuration the library refuses (a dtype the parameters cannot take) is left out; one fits
// when its total in the memory the job computes in (device_total_bytes in CUDA memory, else
// host_total_bytes) is at most the budget. Fastest: most tokens per second per rank, then the
// smaller total, then enumeration order.
#pragma once

#include <cstddef>
#include <vector>

#include "core/process_groups.hpp"
#include "plan/machine.hpp"
#include "plan/memory_plan.hpp"
#include "plan/plan_job.hpp"
#include "plan/plan_model.hpp"
#include "plan/step_time.hpp"

namespace fsdp::plan {

// One way to shard the job: what fsdp_config_t's strategy, sharding_factor, hfsdp and hpz say.
struct Sharding {
  Strategy strategy = Strategy::FullShard;
  int factor = 0;
  bool hfsdp = false, hpz = false;
};

// The shardings a sweep tries for `world` ranks, `ranks_per_node` to a node.
std::vector<Sharding> sweep_shardings(int world, int ranks_per_node);

struct SweepEntry {
  PlanJob job;
  MemoryPlan memory;
  StepTime time;
};

// The memory the job computes in: what a budget bounds.
std::size_t budgeted_bytes(const PlanJob& job, const MemoryPlan& m);

// Throws what the base job's plans throw (its topology, its sequence, the machine), and
// InvalidArgument naming budget_bytes when it is 0.
std::vector<SweepEntry> sweep(const PlanModel& model, const PlanJob& base, const Machine& machine,
                              std::size_t budget_bytes);

}  // namespace fsdp::plan
