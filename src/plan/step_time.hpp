// How long one training step of a rank takes on a machine (doc/planning-model.md, "Step time"):
// a model, with every assumption stated there.
//
// Computation: 6 P T FLOPs (P parameters, T = batch x sequence tokens per rank), plus
// 12 L b s^2 h for attention scores when the model has a transformer shape; activation
// checkpointing recomputes the forward in backward (2 P T + 4 L b s^2 h more). That runs at
// peak_flops(param dtype) x compute_efficiency, split among units by their parameter count
// (forward one third of the model FLOPs, backward the rest).
// Communication: each collective of the training step (plan/training_step.hpp) over a group of
// n > 1 ranks runs as a ring: latency + (n-1)/n of the buffer (an all-reduce 2(n-1)/n) over the
// slowest link of its group (inter-node when the group spans nodes, else intra-node).
// Overlap: one computation stream and one communication stream (the library's one progress
// thread). Without prefetch a unit's all-gather starts when the previous unit's computation ends
// (exposed); with prefetch (the job's prefetch_forward/backward) it starts when the previous
// unit's computation starts, so it hides behind it. A reduce starts when its unit's backward
// ends and runs behind the following units' computation; the step ends when both streams are
// done. CPU offload adds, on the communication stream, each unshard's copy of the shard to the
// device and each reduce's copy of the gradient shard to the host (storage dtype, over
// host_device_bandwidth). The optimizer step's time (on the CPU under offload) is not modeled.
#pragma once

#include "plan/machine.hpp"
#include "plan/plan_job.hpp"
#include "plan/plan_model.hpp"

namespace fsdp::plan {

struct StepTime {
  double compute_s = 0;     // the computation, recomputation included
  double all_gather_s = 0;  // each collective's time, summed (overlapped or not)
  double reduce_scatter_s = 0;
  double all_reduce_s = 0;
  double offload_copy_s = 0;  // CPU offload's copies between host and device
  double exposed_comm_s = 0;  // step_s - compute_s: communication nothing hid
  double step_s = 0;
  double tokens_per_step = 0;          // per rank
  double model_flops_per_step = 0;     // per rank, without recomputation
  double hardware_flops_per_step = 0;  // per rank, with recomputation
  double tflops_per_gpu = 0;           // hardware FLOPs per second, in 10^12
};

// Throws what place_rank, planned_units, training_step, job_sequence and check_machine throw.
StepTime plan_time(const PlanModel& model, const PlanJob& job, const Machine& machine, int rank);

}  // namespace fsdp::plan
