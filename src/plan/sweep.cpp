#include "plan/sweep.hpp"

#include <algorithm>
#include <climits>

#include "base/error.hpp"
#include "plan/activations.hpp"

namespace fsdp::plan {

std::vector<Sharding> sweep_shardings(int world, int ranks_per_node) {
  std::vector<Sharding> out;
  out.push_back({Strategy::FullShard, 0});
  if (world > ranks_per_node) out.push_back({Strategy::FullShard, 0, false, true});  // hpZ
  for (int f = 2; f < world; ++f)
    if (world % f == 0 && (f % ranks_per_node == 0 || ranks_per_node % f == 0)) {
      out.push_back({Strategy::HybridShard, f});
      out.push_back({Strategy::HybridShard, f, true});                                 // HFSDP
      if (f > ranks_per_node) out.push_back({Strategy::HybridShard, f, false, true});  // hpZ
    }
  out.push_back({Strategy::NoShard, 0});
  return out;
}

std::size_t budgeted_bytes(const PlanJob& job, const MemoryPlan& m) {
  return job.options.placement.memory == MemoryPlace::Cuda ? m.device_total_bytes
                                                           : m.host_total_bytes;
}

namespace {

// The plans of one configuration, or nothing where the library refuses it.
bool planned(const PlanModel& model, const PlanJob& job, const Machine& machine, SweepEntry& out) {
  try {
    check_option_combinations(job.options);  // as fsdp_init refuses them
    out = {job, plan_memory(model, job), plan_time(model, job, machine, 0)};
    return true;
  } catch (const Error& e) {
    if (e.code() == Errc::InvalidArgument || e.code() == Errc::Unsupported) return false;
    throw;
  }
}

}  // namespace

std::vector<SweepEntry> sweep(const PlanModel& model, const PlanJob& base, const Machine& machine,
                              std::size_t budget_bytes) {
  if (budget_bytes == 0) fail(Errc::InvalidArgument, "budget_bytes = 0: must be > 0");
  check_machine(machine);
  job_topology(base);
  job_sequence(model, base);
  const bool device = base.options.placement.memory == MemoryPlace::Cuda;
  std::vector<SweepEntry> fits;
  for (const Sharding& s : sweep_shardings(base.world_size, base.ranks_per_node))
    for (const DType param : {DType::Float32, DType::BFloat16})
      for (const bool checkpointing : {false, true})
        for (const bool offload : {false, true}) {
          if (offload && !device) continue;
          PlanJob job = base;
          job.options.strategy = s.strategy;
          job.options.sharding_factor = s.factor;
          job.options.hfsdp = s.hfsdp;
          job.options.hpz = s.hpz;
          job.options.precision.param = param;
          job.activation_checkpointing = checkpointing;
          job.options.placement.cpu_offload = offload;
          // Memory grows with the batch: the first batch that does not fit ends the doubling.
          for (job.batch = 1; job.batch <= INT_MAX / 2; job.batch *= 2) {
            SweepEntry e;
            if (!planned(model, job, machine, e) || budgeted_bytes(job, e.memory) > budget_bytes)
              break;
            fits.push_back(e);
          }
        }
  std::stable_sort(fits.begin(), fits.end(), [](const SweepEntry& a, const SweepEntry& b) {
    const double ra = a.time.tokens_per_step / a.time.step_s;
    const double rb = b.time.tokens_per_step / b.time.step_s;
    if (ra != rb) return ra > rb;
    return budgeted_bytes(a.job, a.memory) < budgeted_bytes(b.job, b.memory);
  });
  return fits;
}

}  // namespace fsdp::plan
