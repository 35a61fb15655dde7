// "A training step", the sequence of calls a plan is computed for (doc/planning-model.md), as a
// list of events that the memory plan replays against the library's pool and the traffic plan
// counts collectives in. It is what a caller does with synchronous calls, from a context whose
// units were just created (or which ran the same step before):
//   fsdp_begin_forward; forward, for each unit u in order:  unshard u, then each distinct owner
//     of u's ties (in tie
//     order, those not u); reshard u, then those owners;
//   fsdp_begin_backward; backward, for each unit u in reverse order:  unshard u and its tie
//     owners as in forward;
//     write u's full gradient (fsdp_grad_data on its trainable parameters, if any), then the
//     owner's for each tie whose parameter is trainable; reshard u, then its owners; then reduce
//     (fsdp_reduce_grads, gradient sync on) u if it has a gradient written and every unit tied to
//     it is done with backward, then each owner of u's ties for which that now holds;
//   optimizer step (if the job has an optimizer) over every unit, in order.
// With prefetch (fsdp_set_prefetch), each caller's unshard may also start the all-gather of the
// unit predicted to come next, which max_unsharded bounds; the memory plan replays that by the
// scheduler's rule (prefetch_candidate). Without it max_unsharded plays no part: synchronous calls
// hold a unit and its tie owners, never more.
#pragma once

#include <cstddef>
#include <vector>

#include "plan/plan_model.hpp"

namespace fsdp::plan {

struct StepEvent {
  enum class Kind {
    BeginForward,   // fsdp_begin_forward (unit unused)
    BeginBackward,  // fsdp_begin_backward (unit unused)
    Unshard,        // fsdp_unshard: an all-gather into a fresh unsharded buffer, or a prefetch's
    Reshard,        // fsdp_reshard: the buffer back to the pool
    GradData,       // fsdp_grad_data into the unit's full gradient (or a tie's into it)
    Reduce,         // fsdp_reduce_grads
    OptimizerStep,  // fsdp_optimizer_step (unit unused)
  };
  Kind kind;
  std::size_t unit = 0;
  // hpZ (mark_secondaries): an Unshard that gathers from the node's secondary partitions, a
  // Reshard that keeps one.
  bool node_local = false;
};

// Throws InvalidArgument naming the tie for one whose owner or parameter the model lacks.
std::vector<StepEvent> training_step(const PlanModel& model);

// hpZ's rule (core/secondary_partition.hpp) over a step: a Reshard ending a forward use (no
// GradData for the unit since its Unshard) keeps a secondary partition; the unit's next Unshard
// gathers from it inside the node and drops it; the optimizer step drops every one.
void mark_secondaries(std::vector<StepEvent>& events, std::size_t units);

}  // namespace fsdp::plan
