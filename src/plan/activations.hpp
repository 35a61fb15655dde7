// What a rank's forward keeps for its backward (doc/planning-model.md, "Activations"): memory the
// library never allocates, so fsdp_memory_stats does not see it, yet it decides whether a batch
// fits on a device.
//
// Per transformer layer, for s tokens per sequence, b sequences, hidden h, a heads, feed-forward
// width f and e bytes per element of the param dtype (masks 1 byte), the activations autograd
// keeps are those Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", section 4.1, no tensor or sequence parallelism) count:
//   e (8 sbh + 2 sbf + 2 a s^2 b) + 2 sbh + a s^2 b
// which is their sbh (34 + 5 as/h) for e = 2 and f = 4h. With activation checkpointing each
// layer keeps only its input (e sbh) and one layer's full activations exist again while it is
// recomputed in backward. Not counted: the embeddings' and the output layer's activations
// (logits), grouped-query attention's smaller K and V, a gated MLP's third matrix, and what the
// framework's allocator rounds or caches.
#pragma once

#include <cstddef>

#include "base/dtype.hpp"
#include "plan/plan_job.hpp"
#include "plan/plan_model.hpp"

namespace fsdp::plan {

struct ActivationPlan {
  int layers = 0;             // the shape's layers; without a shape, the model's units
  std::size_t per_layer = 0;  // one layer's full activations
  std::size_t bytes = 0;      // held at the end of forward, plus a recomputed layer
  bool estimated = false;     // from the transformer shape (false: the caller's, or none)
};

// Tokens per sequence: job.sequence, or the model's max_sequence for 0. Throws InvalidArgument
// naming job->sequence_length when it is negative, above the model's max_sequence, or 0 for a
// model without a shape.
int job_sequence(const PlanModel& model, const PlanJob& job);

// The activations of `job` with elements of `element` (the param dtype). Without the caller's
// bytes per layer and without a transformer shape there is nothing to estimate from: 0 bytes,
// not estimated. Throws InvalidArgument naming the job's field: batch < 1, a sequence
// job_sequence refuses, activation checkpointing with the caller's bytes on a model without a
// shape (its layers' input size is unknown), or a size beyond size_t.
ActivationPlan plan_activations(const PlanModel& model, const PlanJob& job, DType element);

}  // namespace fsdp::plan
