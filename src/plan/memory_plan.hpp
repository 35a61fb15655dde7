// What one rank holds over a training step (plan/training_step.hpp), by fsdp_memory_stats_t's
// fields: the step's events replayed against the library's own buffer pool, scratch and memory
// accounting over a memory space without memory (plan/ledger_space.hpp), with every size from the
// rules the units themselves use (core/unit_bytes.hpp over FlatLayout and resolved precision,
// fsdp::kept_state_buffers, the MPI transport's reduce_scatter_scratch_bytes, the scheduler's
// prefetch_candidate). The stats a context reports after that step (with prefetch, after the
// second of two: PlanJob::steps), from its creation on, equal the plan's exactly.
//
// Modeled placements: host memory with the MPI transport (cfg->transport = FSDP_TRANSPORT_MPI),
// where unsharded buffers come from the pool and reduce-scatter scratch is the MPI transport's;
// and CUDA device memory with NCCL (FSDP_TRANSPORT_NCCL, or AUTO planned as NCCL), whose own
// buffers the library does not account and the plan does not count, with or without CPU offload
// (shards, gradient shards and optimizer state in pinned host memory; unsharded parameters, full
// gradients, the pool and partial sums on the device). The shared-memory transports (one node
// copy, arena scratch) and the staged transport (CUDA with MPI: pinned staging) hold memory
// elsewhere and are refused (Unsupported) until modeled. The MPI transport's piece size is the
// context's (FSDP_RING_PIECE_BYTES); a context on a node with more ranks than cores sets it to 0,
// which changes scratch only for blocks larger than a piece.
//
// Beyond what fsdp_memory_stats reports, a plan counts the activations (plan/activations.hpp)
// and each memory's total: the high-water mark of the library's buffers there plus, where the
// computation runs, the activations (an upper bound: the two peaks need not coincide).
#pragma once

#include <cstddef>

#include "plan/plan_job.hpp"
#include "plan/plan_model.hpp"

namespace fsdp::plan {

struct MemoryPlan {
  std::size_t shard_bytes = 0, grad_shard_bytes = 0, optimizer_state_bytes = 0;
  std::size_t unsharded_model_bytes = 0;
  std::size_t peak_unsharded_bytes = 0, peak_full_grad_bytes = 0, peak_parameter_bytes = 0;
  std::size_t pool_cached_bytes = 0, scratch_bytes = 0, peak_bytes = 0;
  std::size_t secondary_bytes = 0, peak_secondary_bytes = 0;  // hpZ
  std::size_t activation_bytes = 0, device_total_bytes = 0, host_total_bytes = 0;
};

// Every rank of a job holds the same (each shard block is padded to one size). Throws what
// planned_units, training_step and plan_activations throw, and Unsupported naming
// cfg->memory_space or cfg->transport for a placement not modeled.
MemoryPlan plan_memory(const PlanModel& model, const PlanJob& job);

}  // namespace fsdp::plan
