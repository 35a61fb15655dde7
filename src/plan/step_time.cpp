#include "plan/step_time.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "plan/activations.hpp"
#include "plan/training_step.hpp"

namespace fsdp::plan {
namespace {

// A unit held for its computation: the unshards before it (the unit, then its tie owners) and
// the reduces its release made ready.
struct Hold {
  std::size_t unit = 0;
  std::vector<std::size_t> gathers, reduces;
  std::vector<bool> node_local;  // per gather: from the node's secondaries (hpZ)
};

// Forward's holds and backward's, in the order of the training step.
void split_holds(const std::vector<StepEvent>& step, std::vector<Hold> (&phases)[2]) {
  int phase = 0;
  bool open = false;
  for (const StepEvent& e : step) {
    std::vector<Hold>& holds = phases[phase];
    switch (e.kind) {
      case StepEvent::Kind::BeginForward: phase = 0, open = false; break;
      case StepEvent::Kind::BeginBackward: phase = 1, open = false; break;
      case StepEvent::Kind::Unshard:
        if (!open) holds.push_back({e.unit, {}, {}, {}}), open = true;
        holds.back().gathers.push_back(e.unit);
        holds.back().node_local.push_back(e.node_local);
        break;
      case StepEvent::Kind::Reshard:
        if (open && e.unit == holds.back().unit) open = false;
        break;
      case StepEvent::Kind::Reduce: holds.back().reduces.push_back(e.unit); break;
      case StepEvent::Kind::GradData:
      case StepEvent::Kind::OptimizerStep: break;
    }
  }
}

// A ring over one group: its size and the link it is limited by.
struct Link {
  int ranks = 1;
  double bandwidth = 0, latency = 0;
  double time(double bytes, double passes) const {
    if (ranks == 1) return 0;
    return latency + passes * bytes * (ranks - 1) / ranks / bandwidth;
  }
};

// `per_node`: the group's ranks on each node whose NICs carry its crossings. NCCL runs a
// collective as one ring per channel, a channel per NIC, each crossing between nodes at another
// GPU: a group with k ranks on a node crosses at k GPUs' inter-node bandwidth, up to the
// intra-node link the ring also takes. The library's MPI ring (host memory) crosses at one rank.
Link group_link(const Machine& m, int ranks, int first, int last, int ranks_per_node,
                int per_node) {
  Link l;
  l.ranks = ranks;
  const bool spans = first / ranks_per_node != last / ranks_per_node;
  l.bandwidth = spans ? std::min(m.intra_node_bandwidth, m.inter_node_bandwidth * per_node)
                      : m.intra_node_bandwidth;
  l.latency = spans ? m.inter_node_latency_s : m.intra_node_latency_s;
  return l;
}

}  // namespace

StepTime plan_time(const PlanModel& model, const PlanJob& job, const Machine& machine, int rank) {
  check_machine(machine);
  const RankPlace p = place_rank(job, rank);
  const std::vector<PlannedUnit> units = planned_units(model, job);
  const int f = p.sharding_factor, rpn = job.ranks_per_node;
  const int shard_first = p.position / f * f, column = p.position % f;
  const bool channels = job.options.placement.memory == MemoryPlace::Cuda;  // NCCL's rings
  const int shard_per_node = channels ? std::min(f, rpn) : 1;
  const int replicate_per_node = channels && f < rpn ? rpn / f : 1;
  const Link shard = group_link(machine, f, shard_first, shard_first + f - 1, rpn, shard_per_node);
  const Link replicate = group_link(machine, p.replicas, column, column + (p.replicas - 1) * f, rpn,
                                    replicate_per_node);
  const int r = node_ranks(job);  // hpZ: the shard group's ranks on this node
  const Link node = group_link(machine, r > 0 ? r : 1, shard_first, shard_first, rpn, 1);
  const bool hfsdp = job.options.hfsdp && p.replicas > 1;

  StepTime t;
  const double tokens = static_cast<double>(job.batch) * job_sequence(model, job);
  double params = 0;
  for (const PlannedUnit& u : units) params += static_cast<double>(u.layout.numel());
  double attention = 0;  // forward FLOPs of the attention scores: 4 L b s^2 h
  if (model.transformer) {
    const TransformerShape& s = *model.transformer;
    attention = 4.0 * s.layers * tokens * job_sequence(model, job) * s.hidden;
  }
  const double forward = 2 * params * tokens + attention;
  t.tokens_per_step = tokens;
  t.model_flops_per_step = 3 * forward;
  t.hardware_flops_per_step = t.model_flops_per_step + (job.activation_checkpointing ? forward : 0);
  const double rate = peak_flops(machine, units[0].precision.param) * machine.compute_efficiency;
  t.compute_s = t.hardware_flops_per_step / rate;
  // Unit u's share of a phase's computation: its parameters' share.
  const auto compute = [&](std::size_t u, int phase) {
    const double share = params > 0 ? static_cast<double>(units[u].layout.numel()) / params : 0;
    return share * (phase == 0 ? forward : t.hardware_flops_per_step - forward) / rate;
  };
  const bool offload = job.options.placement.cpu_offload;
  const auto copy = [&](std::size_t bytes) {
    const double s = offload ? static_cast<double>(bytes) / machine.host_device_bandwidth : 0;
    t.offload_copy_s += s;
    return s;
  };
  const auto gather = [&](std::size_t u, bool node_local) {
    const double bytes = static_cast<double>(units[u].bytes().unsharded());
    const double s = node_local && r > 0 ? node.time(bytes, 1) : shard.time(bytes, 1);
    t.all_gather_s += s;
    return s + copy(units[u].bytes().shard());
  };
  const auto reduce = [&](std::size_t u) {
    const UnitBytes b = units[u].bytes();
    double rs = shard.time(static_cast<double>(b.reduce_input()), 1), ar = 0;
    if (hfsdp)  // the partial sum reduce-scattered across replicas
      rs += replicate.time(static_cast<double>(b.replica_sum()), 1);
    else if (p.replicas > 1)
      ar = replicate.time(static_cast<double>(b.replica_sum()), 2);
    t.reduce_scatter_s += rs;
    t.all_reduce_s += ar;
    return rs + ar + copy(b.grad_shard());
  };

  std::vector<Hold> phases[2];
  std::vector<StepEvent> step = training_step(model);
  mark_secondaries(step, units.size());
  split_holds(step, phases);
  double clock = 0, comm = 0;  // when the computation stream and the communication stream are free
  for (int phase = 0; phase < 2; ++phase) {
    const bool prefetch = phase == 0 ? job.prefetch_forward : job.prefetch_backward;
    const std::vector<Hold>& holds = phases[phase];
    double prefetched_ready = 0;
    for (std::size_t i = 0; i < holds.size(); ++i) {
      const Hold& h = holds[i];
      const bool was_prefetched = prefetch && i > 0;
      double ready = was_prefetched ? prefetched_ready : 0;
      for (std::size_t k = was_prefetched ? 1 : 0; k < h.gathers.size(); ++k)
        ready = comm = std::max(comm, clock) + gather(h.gathers[k], h.node_local[k]);
      if (was_prefetched) ready = std::max(ready, prefetched_ready);
      const double start = std::max(clock, ready);
      if (prefetch && i + 1 < holds.size())
        prefetched_ready = comm =
            std::max(comm, start) + gather(holds[i + 1].unit, holds[i + 1].node_local[0]);
      clock = start + compute(h.unit, phase);
      for (std::size_t r : h.reduces) comm = std::max(comm, clock) + reduce(r);
    }
  }
  t.step_s = std::max(clock, comm);
  if (hfsdp && job.optimizer)  // after the update: each unit's trainable block across replicas
    for (const PlannedUnit& u : units)
      if (u.has_grad()) {
        const double s = replicate.time(static_cast<double>(u.bytes().trainable_shard()), 1);
        t.all_gather_s += s;
        t.step_s += s;
      }
  t.exposed_comm_s = std::max(0.0, t.step_s - t.compute_s);
  t.tflops_per_gpu = t.step_s > 0 ? t.hardware_flops_per_step / t.step_s / 1e12 : 0;
  return t;
}

}  // namespace fsdp::plan
