#include "plan/plan_job.hpp"

#include <string>

#include "base/error.hpp"

namespace fsdp::plan {

Topology job_topology(const PlanJob& job) {
  if (job.world_size < 1)
    fail(Errc::InvalidArgument,
         "job->world_size = " + std::to_string(job.world_size) + ": must be >= 1");
  if (job.ranks_per_node < 1 || job.world_size % job.ranks_per_node != 0)
    fail(Errc::InvalidArgument, "job->ranks_per_node = " + std::to_string(job.ranks_per_node) +
                                    ": must be >= 1 and divide job->world_size = " +
                                    std::to_string(job.world_size) + " (nodes of equal size)");
  Topology t;
  t.world_size = job.world_size;
  t.ranks_per_node = job.ranks_per_node;
  t.largest_node = job.ranks_per_node;
  t.node_count = job.world_size / job.ranks_per_node;
  return t;
}

RankPlace place_rank(const PlanJob& job, int rank) {
  const Topology t = job_topology(job);
  if (rank < 0 || rank >= t.world_size)
    fail(Errc::OutOfRange, "rank = " + std::to_string(rank) + ": the job has ranks 0.." +
                               std::to_string(t.world_size - 1));
  if (job.options.hfsdp)
    fail(Errc::Unsupported, "cfg->hfsdp = 1: the planner does not model HFSDP yet");
  if (job.options.hpz) fail(Errc::Unsupported, "cfg->hpz = 1: the planner does not model hpZ yet");
  RankPlace p;
  p.position = rank;
  p.node = rank / t.ranks_per_node;
  p.sharding_factor = resolve_sharding_factor(job.options.strategy, job.options.sharding_factor, t);
  p.replicas = t.world_size / p.sharding_factor;
  return p;
}

std::vector<PlannedUnit> planned_units(const PlanModel& model, const PlanJob& job) {
  if (model.units.empty())
    fail(Errc::State, "plan: the model has no units (fsdp_plan_add_unit or fsdp_plan_read_model)");
  const int f = place_rank(job, 0).sharding_factor;
  std::vector<PlannedUnit> units;
  units.reserve(model.units.size());
  for (std::size_t i = 0; i < model.units.size(); ++i) {
    const PlanUnit& u = model.units[i];
    FlatLayout layout(u.params, f);
    const std::string who =
        "unit " + std::to_string(i) + (u.name.empty() ? "" : " ('" + u.name + "')");
    // As Context::create_unit resolves it; a plan's units ask nothing of their own.
    const Precision p = resolve_precision(layout.dtype(), job.options.precision, {}, who);
    units.push_back({std::move(layout), p});
  }
  return units;
}

}  // namespace fsdp::plan
