#include "plan/traffic_plan.hpp"

#include <vector>

#include "plan/training_step.hpp"

namespace fsdp::plan {
namespace {

// The ring of one group: whether this rank's successor is on another node, and the group's size.
struct Ring {
  int size = 1;
  bool crosses_nodes = false;
};

class Sender {
 public:
  Sender(const PlanJob& job, const RankPlace& p) {
    const int f = p.sharding_factor, rpn = job.ranks_per_node;
    const auto node = [rpn](int position) { return position / rpn; };
    // Shard group: F consecutive positions; replicate group: positions p % F + k F.
    const int first = p.position / f * f;
    shard_.size = f;
    shard_.crosses_nodes = node(first + (p.position - first + 1) % f) != p.node;
    replicate_.size = p.replicas;
    const int k = p.position / f;
    replicate_.crosses_nodes = node(p.position % f + (k + 1) % p.replicas * f) != p.node;
  }
  const Ring& shard() const { return shard_; }
  const Ring& replicate() const { return replicate_; }

  // What a ring collective over `r` sends to the successor: `parts` times (n-1)/n of `bytes`.
  void send(TrafficPlan& t, const Ring& r, std::size_t bytes, std::size_t parts) const {
    if (r.size == 1) return;
    const std::size_t n = static_cast<std::size_t>(r.size);
    const std::size_t sent = bytes * parts * (n - 1) / n;
    (r.crosses_nodes ? t.inter_node_bytes : t.intra_node_bytes) += sent;
  }

 private:
  Ring shard_, replicate_;
};

}  // namespace

TrafficPlan plan_traffic(const PlanModel& model, const PlanJob& job, int rank) {
  const RankPlace place = place_rank(job, rank);
  const std::vector<PlannedUnit> units = planned_units(model, job);
  const Sender sender(job, place);
  const bool hfsdp = job.options.hfsdp && place.replicas > 1;
  TrafficPlan t;
  const int r = node_ranks(job);
  const Ring node{r, false};  // hpZ: the shard group's ranks on this node
  std::vector<StepEvent> step = training_step(model);
  mark_secondaries(step, units.size());
  for (const StepEvent& e : step) {
    if (e.kind == StepEvent::Kind::Unshard && e.node_local && r > 0) {
      const std::size_t b = units[e.unit].bytes().unsharded();
      ++t.node_all_gather_calls;
      t.node_all_gather_bytes += b;
      sender.send(t, node, b, 1);
    } else if (e.kind == StepEvent::Kind::Unshard) {
      const std::size_t b = units[e.unit].bytes().unsharded();
      ++t.all_gather_calls;
      t.all_gather_bytes += b;
      sender.send(t, sender.shard(), b, 1);
    } else if (e.kind == StepEvent::Kind::Reduce) {
      const UnitBytes b = units[e.unit].bytes();
      ++t.reduce_scatter_calls;
      t.reduce_scatter_bytes += b.reduce_input();
      sender.send(t, sender.shard(), b.reduce_input(), 1);
      if (place.replicas == 1) continue;
      const std::size_t partial = b.replica_sum();
      if (hfsdp) {
        ++t.replica_reduce_scatter_calls;
        t.replica_reduce_scatter_bytes += partial;
        sender.send(t, sender.replicate(), partial, 1);
      } else {
        ++t.all_reduce_calls;
        t.all_reduce_bytes += partial;
        sender.send(t, sender.replicate(), partial, 2);
      }
    } else if (e.kind == StepEvent::Kind::OptimizerStep && hfsdp && job.optimizer) {
      for (const PlannedUnit& u : units) {  // Optimizer::step, each unit with a gradient
        if (!u.has_grad()) continue;
        const std::size_t b = u.bytes().trainable_shard();
        ++t.replica_all_gather_calls;
        t.replica_all_gather_bytes += b;
        sender.send(t, sender.replicate(), b, 1);
      }
    }
  }
  return t;
}

}  // namespace fsdp::plan
