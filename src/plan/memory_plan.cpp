#include "plan/memory_plan.hpp"

#include <cstdint>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "base/memory_accounting.hpp"
#include "core/scheduler.hpp"
#include "plan/activations.hpp"
#include "plan/ledger_space.hpp"
#include "plan/training_step.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/scratch.hpp"
#include "transport/transport_options.hpp"

namespace fsdp::plan {
namespace {

void require_modeled(const PlanJob& job) {
  const PlacementRequest& p = job.options.placement;
  if (p.memory == MemoryPlace::Host && p.transport != TransportKind::Mpi)
    fail(Errc::Unsupported,
         "cfg->transport: in host memory the memory plan models FSDP_TRANSPORT_MPI only "
         "(FSDP_TRANSPORT_AUTO may pick the shared-memory transport, which holds unsharded "
         "parameters elsewhere)");
  if (p.memory == MemoryPlace::Cuda && p.transport != TransportKind::Nccl &&
      p.transport != TransportKind::Auto)
    fail(Errc::Unsupported,
         "cfg->transport: in CUDA memory the memory plan models FSDP_TRANSPORT_NCCL (or AUTO) "
         "only (MPI goes through pinned staging buffers it does not model)");
}

// One rank's buffers and accounting through the step, each change in the order the unit and the
// optimizer make it (core/unit.cpp, optim/optimizer.cpp).
class Replay {
 public:
  // `shards_here`: whether the shards, gradient shards and optimizer state count (false: the
  // device's share under CPU offload, where they are in host memory). `node_ranks`: hpZ's R.
  Replay(const std::vector<PlannedUnit>& units, const PlanJob& job, const RankPlace& place,
         int node_ranks, bool shards_here)
      : units_(units),
        node_ranks_(static_cast<std::size_t>(node_ranks)),
        job_(job),
        place_(place),
        pool_(space_, accounting_),
        partial_sums_(space_, accounting_),
        transport_scratch_(space_, accounting_),
        unsharded_(units.size()),
        secondary_(units.size()),
        full_grad_(units.size()),
        grad_shard_(units.size(), false),
        has_grad_(units.size(), false),
        prefetched_(units.size(), false),
        has_state_(units.size(), false),
        shards_here_(shards_here) {
    for (const PlannedUnit& u : units_) add_shard_kind(MemoryKind::Shard, u.bytes().shard());
  }
  ~Replay() {
    for (Lease& l : unsharded_) l.reset();
    for (Lease& l : secondary_) l.reset();
    for (Lease& l : full_grad_) l.reset();
  }

  void run(const std::vector<StepEvent>& events) {
    for (const StepEvent& e : events) {
      const std::size_t u = e.unit;
      switch (e.kind) {
        case StepEvent::Kind::BeginForward:
          release_unclaimed();
          for (int k = 0; k < 2; ++k) previous_[k] = std::move(recorded_[k]), recorded_[k].clear();
          phase_ = 0;
          break;
        case StepEvent::Kind::BeginBackward:
          release_unclaimed();
          phase_ = 1;
          break;
        case StepEvent::Kind::Unshard: caller_unshard(u); break;
        case StepEvent::Kind::Reshard:
          // hpZ: a forward use's reshard keeps the node piece before the buffer goes back.
          if (e.node_local && node_ranks_)
            secondary_[u] = pool_.acquire(units_[u].bytes().unsharded() / node_ranks_,
                                          BufferPool::Use::Secondary);
          unsharded_[u].reset();
          break;
        case StepEvent::Kind::GradData:
          if (!full_grad_[u])
            full_grad_[u] =
                pool_.acquire(units_[u].bytes().full_grad(), BufferPool::Use::Gradients);
          break;
        case StepEvent::Kind::Reduce: reduce(u); break;
        case StepEvent::Kind::OptimizerStep:
          release_unclaimed();  // Context::before_shard_update
          for (Lease& l : secondary_) l.reset();
          optimizer_step();
          break;
      }
    }
  }

  MemoryPlan result() const {
    const MemoryAccounting& a = accounting_;
    MemoryPlan m;
    m.shard_bytes = a.bytes(MemoryKind::Shard);
    m.grad_shard_bytes = a.bytes(MemoryKind::GradShard);
    m.optimizer_state_bytes = a.bytes(MemoryKind::OptimizerState);
    for (const PlannedUnit& u : units_) m.unsharded_model_bytes += u.bytes().model();
    m.peak_unsharded_bytes = a.peak(MemoryKind::Unsharded);
    m.peak_full_grad_bytes = a.peak(MemoryKind::FullGrad);
    m.peak_parameter_bytes = a.peak_parameters();
    m.pool_cached_bytes = a.bytes(MemoryKind::PoolCached);
    m.scratch_bytes = a.bytes(MemoryKind::Scratch);
    m.secondary_bytes = a.bytes(MemoryKind::Secondary);
    m.peak_secondary_bytes = a.peak(MemoryKind::Secondary);
    m.peak_bytes = a.peak();
    return m;
  }

 private:
  void unshard(std::size_t u) {
    unsharded_[u] = pool_.acquire(units_[u].bytes().unsharded(), BufferPool::Use::Parameters);
  }
  // Scheduler::caller_unshard: claims the unit's prefetch or unshards it, records it, and starts
  // the predicted next unit's all-gather when prefetch is on and the rate limiter allows (no
  // reduce is ever in flight in a synchronous step, so held units are unsharded ones).
  void caller_unshard(std::size_t u) {
    if (prefetched_[u])
      prefetched_[u] = false;
    else
      unshard(u);
    secondary_[u].reset();  // hpZ: read by the all-gather, which has completed (or is claimed)
    std::vector<uint64_t>& rec = recorded_[phase_];
    rec.push_back(u);
    const bool on = phase_ == 0 ? job_.prefetch_forward : job_.prefetch_backward;
    const std::optional<uint64_t> next = prefetch_candidate(previous_[phase_], rec.size() - 1, u);
    if (!on || !next || unsharded_[*next]) return;
    int held = 0;
    for (const Lease& l : unsharded_) held += l ? 1 : 0;
    if (held >= job_.options.max_unsharded) return;
    unshard(*next);
    prefetched_[*next] = true;
  }
  void release_unclaimed() {
    for (std::size_t u = 0; u < units_.size(); ++u)
      if (prefetched_[u]) {
        prefetched_[u] = false;
        secondary_[u].reset();
        unsharded_[u].reset();
      }
  }

  // Unit::reduce_grads_async, then Unit::reduce_into and the transport, then complete_pending.
  void reduce(std::size_t u) {
    const PlannedUnit& unit = units_[u];
    const UnitBytes b = unit.bytes();
    if (!grad_shard_[u]) {
      grad_shard_[u] = true;
      add_shard_kind(MemoryKind::GradShard, b.grad_shard());
    }
    Lease copy;
    if (unit.precision.reduce != unit.precision.param) {
      copy = pool_.acquire(b.reduce_input(), BufferPool::Use::ReduceCopies);
      full_grad_[u].reset();
    }
    if (place_.replicas > 1) partial_sums_.get(b.partial_sum());
    const DType r = unit.precision.reduce;
    const MpiTransportOptions& o = job_.options.transport;
    const bool mpi = job_.options.placement.transport == TransportKind::Mpi;  // NCCL's are its own
    if (const std::size_t s =
            mpi ? reduce_scatter_scratch_bytes(o, unit.layout.trainable_shard_numel(), r,
                                               place_.sharding_factor)
                : 0)
      transport_scratch_.get(s);
    if (mpi && unit.layout.update_pieces() > 1)  // HFSDP: the reduce-scatter across replicas
      if (const std::size_t s =
              reduce_scatter_scratch_bytes(o, unit.layout.grad_shard_numel(), r, place_.replicas))
        transport_scratch_.get(s);
    full_grad_[u].reset();
    copy.reset();
    has_grad_[u] = true;
  }

  // Optimizer::step: state for each unit with a reduced gradient, allocated at its first step.
  void optimizer_step() {
    if (!job_.optimizer) return;
    const HyperParams& h = job_.optimizer->hyperparams;
    const int buffers = kept_state_buffers(job_.optimizer->kind, h.momentum != 0, h.amsgrad);
    for (std::size_t u = 0; u < units_.size(); ++u) {
      if (!has_grad_[u] || has_state_[u]) continue;
      has_state_[u] = true;
      for (int k = 0; k < buffers; ++k)
        add_shard_kind(MemoryKind::OptimizerState, units_[u].bytes().grad_shard());
    }
  }

  void add_shard_kind(MemoryKind k, std::size_t n) {
    if (shards_here_) accounting_.add(k, n);
  }

  const std::vector<PlannedUnit>& units_;
  const std::size_t node_ranks_;  // hpZ's R; 0: no secondaries
  const PlanJob& job_;
  const RankPlace place_;
  LedgerSpace space_;
  MemoryAccounting accounting_;
  BufferPool pool_;
  Scratch partial_sums_, transport_scratch_;  // the context's, and the MPI link's
  std::vector<Lease> unsharded_, secondary_, full_grad_;
  std::vector<bool> grad_shard_, has_grad_;
  std::vector<bool> prefetched_, has_state_;
  const bool shards_here_;
  int phase_ = 0;                                    // 0 forward, 1 backward
  std::vector<uint64_t> recorded_[2], previous_[2];  // unit indices (ids) in caller unshard order
};

}  // namespace

MemoryPlan plan_memory(const PlanModel& model, const PlanJob& job) {
  const std::vector<PlannedUnit> units = planned_units(model, job);
  const RankPlace place = place_rank(job, 0);
  require_modeled(job);
  const ActivationPlan activations = plan_activations(model, job, units[0].precision.param);
  std::vector<StepEvent> step = training_step(model);
  mark_secondaries(step, units.size());
  const int r = node_ranks(job);
  const auto replayed = [&](bool shards_here) {
    Replay replay(units, job, place, r, shards_here);
    for (int k = 0; k < job.steps(); ++k) replay.run(step);
    return replay.result();
  };
  MemoryPlan m = replayed(true);
  m.activation_bytes = activations.bytes;
  const PlacementRequest& p = job.options.placement;
  if (p.memory == MemoryPlace::Host) {
    m.host_total_bytes = m.peak_bytes + m.activation_bytes;
  } else if (!p.cpu_offload) {
    m.device_total_bytes = m.peak_bytes + m.activation_bytes;
  } else {  // the shards' kinds only grow over a step: their final bytes are their peak
    m.device_total_bytes = replayed(false).peak_bytes + m.activation_bytes;
    m.host_total_bytes = m.shard_bytes + m.grad_shard_bytes + m.optimizer_state_bytes;
  }
  return m;
}

}  // namespace fsdp::plan
