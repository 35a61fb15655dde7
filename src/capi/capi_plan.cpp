// C entry points of the planner (fsdp_plan_*): a model built through descriptors or read from a
// file, and a job read as fsdp_init reads its config, handed to plan/ (memory_plan.hpp,
// traffic_plan.hpp). Every call is local and changes nothing when it fails.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.hpp"
#include "capi/arguments.hpp"
#include "capi/config.hpp"
#include "capi/descriptors.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/hyperparams.hpp"
#include "capi/sized_struct.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/json_text.hpp"
#include "core/unit.hpp"
#include "plan/activations.hpp"
#include "plan/machine.hpp"
#include "plan/memory_plan.hpp"
#include "plan/model_sources.hpp"
#include "plan/step_time.hpp"
#include "plan/sweep.hpp"
#include "plan/traffic_plan.hpp"

using fsdp::Errc;
using fsdp::fail;
using fsdp::capi::enum_int;
using fsdp::capi::plan_from;
using fsdp::capi::require_output;
using fsdp::plan::PlanJob;
using fsdp::plan::PlanModel;

namespace {

// The job's fields over FSDP_PLAN_JOB_INIT, its config as fsdp_init reads one (environment
// included), and the optimizer's hyperparameters as fsdp_optimizer_create reads them.
PlanJob read_job(const fsdp_plan_job_t* in) {
  const fsdp_plan_job_t defaults = FSDP_PLAN_JOB_INIT;
  const fsdp_plan_job_t j =
      in ? fsdp::capi::read_sized(*in, defaults, "job", "FSDP_PLAN_JOB_INIT") : defaults;
  PlanJob job;
  job.options = fsdp::capi::options_from_config(j.config);
  fsdp::apply_environment(job.options);
  job.world_size = j.world_size;
  if (j.ranks_per_node < 0)
    fail(Errc::InvalidArgument, "job->ranks_per_node = " + std::to_string(j.ranks_per_node) +
                                    ": must be >= 1, or 0 for one node of world_size ranks");
  job.ranks_per_node = j.ranks_per_node == 0 ? j.world_size : j.ranks_per_node;
  fsdp::plan::job_topology(job);  // world_size and ranks_per_node, named
  if (j.no_optimizer != 0 && j.no_optimizer != 1)
    fail(Errc::InvalidArgument,
         "job->no_optimizer = " + std::to_string(j.no_optimizer) + ": must be 0 or 1");
  for (const auto& [value, field] :
       {std::pair<int, const char*>{j.prefetch_forward, "prefetch_forward"},
        {j.prefetch_backward, "prefetch_backward"}})
    if (value != 0 && value != 1)
      fail(Errc::InvalidArgument,
           std::string("job->") + field + " = " + std::to_string(value) + ": must be 0 or 1");
  job.prefetch_forward = j.prefetch_forward == 1;
  if (j.batch_size < 1)
    fail(Errc::InvalidArgument,
         "job->batch_size = " + std::to_string(j.batch_size) + ": must be >= 1");
  if (j.sequence_length < 0)
    fail(Errc::InvalidArgument, "job->sequence_length = " + std::to_string(j.sequence_length) +
                                    ": must be >= 0 (0: the model's maximum)");
  if (j.activation_checkpointing != 0 && j.activation_checkpointing != 1)
    fail(Errc::InvalidArgument,
         "job->activation_checkpointing = " + std::to_string(j.activation_checkpointing) +
             ": must be 0 or 1");
  if (j.activation_bytes_per_layer < 0)
    fail(Errc::InvalidArgument,
         "job->activation_bytes_per_layer = " + std::to_string(j.activation_bytes_per_layer) +
             ": must be >= 0 (0: the estimate)");
  job.batch = j.batch_size;
  job.sequence = j.sequence_length;
  job.activation_checkpointing = j.activation_checkpointing == 1;
  job.activation_bytes_per_layer = static_cast<std::size_t>(j.activation_bytes_per_layer);
  job.prefetch_backward = j.prefetch_backward == 1;
  const int kind = enum_int(j.optimizer);
  if (kind < 0 || kind >= FSDP_OPTIMIZER_KIND_COUNT)
    fail(Errc::InvalidArgument,
         "job->optimizer = " + std::to_string(kind) + ": not an fsdp_optimizer_kind_t");
  if (!j.no_optimizer) {
    fsdp::plan::PlanOptimizer o;
    o.kind = static_cast<fsdp::OptimizerKind>(kind);
    o.hyperparams = fsdp::capi::read_hyperparams(j.hyperparams, o.kind, "job->hyperparams");
    job.optimizer = o;
  }
  return job;
}

// The machine's figures between fsdp_plan_machine_t and fsdp::plan::Machine (same names), either
// way.
template <class To, class From>
void copy_machine(To& m, const From& c) {
  m.peak_flops_16bit = c.peak_flops_16bit;
  m.peak_flops_32bit = c.peak_flops_32bit;
  m.peak_flops_64bit = c.peak_flops_64bit;
  m.hbm_bytes = c.hbm_bytes;
  m.intra_node_bandwidth = c.intra_node_bandwidth;
  m.intra_node_latency_s = c.intra_node_latency_s;
  m.inter_node_bandwidth = c.inter_node_bandwidth;
  m.inter_node_latency_s = c.inter_node_latency_s;
  m.host_device_bandwidth = c.host_device_bandwidth;
  m.compute_efficiency = c.compute_efficiency;
}

fsdp::plan::Machine read_machine(const fsdp_plan_machine_t* in) {
  if (!in) fail(Errc::InvalidArgument, "machine: NULL (fsdp_plan_machine_preset fills one)");
  const fsdp_plan_machine_t c =
      fsdp::capi::read_sized(*in, FSDP_PLAN_MACHINE_INIT, "machine", "FSDP_PLAN_MACHINE_INIT");
  fsdp::plan::Machine m;
  copy_machine(m, c);
  fsdp::plan::check_machine(m);
  return m;
}

int unit_index(const PlanModel& m, int i, const char* arg) {
  if (i < 0 || static_cast<std::size_t>(i) >= m.units.size())
    fail(Errc::OutOfRange, std::string(arg) + " = " + std::to_string(i) + ": the plan has " +
                               std::to_string(m.units.size()) + " unit(s)");
  return i;
}

std::string unit_label(const PlanModel& m, std::size_t i) {
  const std::string& name = m.units[i].name;
  return "unit " + std::to_string(i) + (name.empty() ? "" : " ('" + name + "')");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Errc::Io, "path = '" + path + "': cannot open it: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(Errc::Io, "path = '" + path + "': cannot read it");
  return text.str();
}

// Each output field once: its name (in the C struct, the description and the docs) and where it
// is in the plan and in the C struct, for fsdp_plan_memory/traffic and fsdp_plan_describe alike.
template <class Plan, class Out, class V>
struct Field {
  const char* name;
  V Plan::*plan;
  V Out::*out;
};
// clang-format off
#define FSDP_PLAN_FIELD(P, O, f) Field<P, O, decltype(P::f)>{#f, &P::f, &O::f}
// clang-format on
using fsdp::plan::MemoryPlan;
using fsdp::plan::StepTime;
using fsdp::plan::TrafficPlan;
const Field<MemoryPlan, fsdp_plan_memory_t, std::size_t> kMemoryFields[] = {
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, shard_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, grad_shard_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, optimizer_state_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, unsharded_model_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, peak_unsharded_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, peak_full_grad_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, peak_parameter_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, pool_cached_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, scratch_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, peak_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, secondary_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, peak_secondary_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, activation_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, device_total_bytes),
    FSDP_PLAN_FIELD(MemoryPlan, fsdp_plan_memory_t, host_total_bytes),
};
const Field<TrafficPlan, fsdp_plan_traffic_t, std::size_t> kTrafficFields[] = {
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, all_gather_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, all_gather_calls),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, reduce_scatter_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, reduce_scatter_calls),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, all_reduce_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, all_reduce_calls),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, intra_node_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, inter_node_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, replica_reduce_scatter_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, replica_reduce_scatter_calls),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, replica_all_gather_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, replica_all_gather_calls),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, node_all_gather_bytes),
    FSDP_PLAN_FIELD(TrafficPlan, fsdp_plan_traffic_t, node_all_gather_calls),
};
const Field<StepTime, fsdp_plan_time_t, double> kTimeFields[] = {
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, compute_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, all_gather_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, reduce_scatter_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, all_reduce_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, offload_copy_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, exposed_comm_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, step_s),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, tokens_per_step),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, model_flops_per_step),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, hardware_flops_per_step),
    FSDP_PLAN_FIELD(StepTime, fsdp_plan_time_t, tflops_per_gpu),
};
#undef FSDP_PLAN_FIELD

template <class Plan, class Out, class V, std::size_t N>
Out to_c(const Plan& p, const Field<Plan, Out, V> (&fields)[N]) {
  Out out{};
  for (const Field<Plan, Out, V>& f : fields) out.*f.out = p.*f.plan;
  return out;
}

std::string json_number(std::size_t v) {
  return std::to_string(v);
}
std::string json_number(double v) {  // finite: the plans divide by checked, positive figures
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

template <class Fields>
std::string json_object(const Fields& fields) {
  std::string out = "{";
  for (const auto& [name, value] : fields)
    out += (out.size() > 1 ? ", \"" : "\"") + std::string(name) + "\": " + json_number(value);
  return out + "}";
}

template <class Plan, class Out, class V, std::size_t N>
std::string to_json(const Plan& p, const Field<Plan, Out, V> (&fields)[N]) {
  std::vector<std::pair<const char*, V>> values;
  for (const Field<Plan, Out, V>& f : fields) values.emplace_back(f.name, p.*f.plan);
  return json_object(values);
}

const char* strategy_name(fsdp::Strategy s) {
  switch (s) {
    case fsdp::Strategy::FullShard: return "full";
    case fsdp::Strategy::HybridShard: return "hybrid";
    case fsdp::Strategy::NoShard: return "none";
  }
  return "?";
}

std::string sweep_json(const PlanModel& m, const PlanJob& base, const fsdp::plan::Machine& machine,
                       std::size_t budget) {
  std::string out = "{\"budget_bytes\": " + std::to_string(budget) + ", \"configurations\": [";
  bool first = true;
  for (const fsdp::plan::SweepEntry& e : fsdp::plan::sweep(m, base, machine, budget)) {
    const PlanJob& j = e.job;
    const fsdp::DType param = fsdp::plan::planned_units(m, j)[0].precision.param;
    out +=
        std::string(first ? "" : ", ") + "{\"strategy\": \"" + strategy_name(j.options.strategy) +
        "\", \"sharding_factor\": " + std::to_string(fsdp::plan::place_rank(j, 0).sharding_factor) +
        ", \"hfsdp\": " + (j.options.hfsdp ? "true" : "false") +
        ", \"hpz\": " + (j.options.hpz ? "true" : "false") + ", \"param_dtype\": \"" +
        fsdp::dtype_name(param) +
        "\", \"activation_checkpointing\": " + (j.activation_checkpointing ? "true" : "false") +
        ", \"cpu_offload\": " + (j.options.placement.cpu_offload ? "true" : "false") +
        ", \"batch_size\": " + std::to_string(j.batch) +
        ", \"sequence_length\": " + std::to_string(fsdp::plan::job_sequence(m, j)) +
        ", \"tokens_per_s\": " + json_number(e.time.tokens_per_step / e.time.step_s) +
        ", \"memory\": " + to_json(e.memory, kMemoryFields) +
        ", \"time\": " + to_json(e.time, kTimeFields) + "}";
    first = false;
  }
  return out + "]}";
}

// Copies `text` out as fsdp_plan_describe and fsdp_plan_sweep do.
void copy_text(const std::string& text, char* json, size_t capacity, size_t* length) {
  if (json && capacity < text.size() + 1)
    fail(Errc::InvalidArgument, "capacity = " + std::to_string(capacity) + ": the text needs " +
                                    std::to_string(text.size() + 1) + " bytes");
  if (json) std::memcpy(json, text.c_str(), text.size() + 1);
  if (length) *length = text.size();
}

// With a machine, the description gains the step time and whether the job fits its memory.
std::string describe(const PlanModel& m, const PlanJob& job, int rank,
                     const fsdp::plan::Machine* machine) {
  const fsdp::plan::RankPlace place = fsdp::plan::place_rank(job, rank);
  const fsdp::plan::TrafficPlan t = fsdp::plan::plan_traffic(m, job, rank);
  std::string memory = "null", fits = "null";  // where the memory plan does not model the placement
  try {
    const MemoryPlan planned = fsdp::plan::plan_memory(m, job);
    memory = to_json(planned, kMemoryFields);
    if (machine)
      fits = fsdp::plan::budgeted_bytes(job, planned) <= machine->hbm_bytes ? "true" : "false";
  } catch (const fsdp::Error& e) {
    if (e.code() != Errc::Unsupported) throw;
  }
  const std::string on_machine =
      machine
          ? ", \"time\": " + to_json(fsdp::plan::plan_time(m, job, *machine, rank), kTimeFields) +
                ", \"fits\": " + fits
          : "";
  std::string units = "[";
  const std::vector<fsdp::plan::PlannedUnit> planned = fsdp::plan::planned_units(m, job);
  for (std::size_t i = 0; i < planned.size(); ++i) {
    const fsdp::UnitBytes b = planned[i].bytes();
    units += (i ? ", {\"name\": " : "{\"name\": ") + fsdp::ckpt::json_quote(m.units[i].name) +
             ", " +
             json_object(std::initializer_list<std::pair<const char*, std::size_t>>{
                             {"params", m.units[i].params.size()},
                             {"numel", planned[i].layout.numel()},
                             {"shard_bytes", b.shard()},
                             {"unsharded_bytes", b.unsharded()},
                             {"grad_shard_bytes", b.grad_shard()}})
                 .substr(1);
  }
  units += "]";
  return "{\"world_size\": " + std::to_string(job.world_size) +
         ", \"ranks_per_node\": " + std::to_string(job.ranks_per_node) +
         ", \"rank\": " + std::to_string(rank) +
         ", \"sharding_factor\": " + std::to_string(place.sharding_factor) +
         ", \"replicas\": " + std::to_string(place.replicas) + ", \"units\": " + units +
         ", \"memory\": " + memory + ", \"traffic\": " + to_json(t, kTrafficFields) + on_machine +
         "}";
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_plan_create(fsdp_plan_t* plan) {
  auto* m = new PlanModel();
  try {
    fsdp::capi::register_plan(m);
  } catch (...) {
    delete m;
    throw;
  }
  *plan = fsdp::capi::to_handle(m);
}

void fsdp_plan_destroy(fsdp_plan_t* plan) {
  PlanModel& m = plan_from(*plan, "*plan");
  fsdp::capi::retire(&m, fsdp::capi::Retired::Destroyed);
  delete &m;
  *plan = nullptr;
}

void fsdp_plan_add_unit(fsdp::plan::PlanModel& m, const char* name, int nparams,
                        const fsdp_param_desc_t* descs, int* unit_index) {
  fsdp::plan::PlanUnit u;
  u.name = name ? name : "";
  u.params = fsdp::capi::specs_from_descriptors(nparams, descs);
  m.units.push_back(std::move(u));
  if (unit_index) *unit_index = static_cast<int>(m.units.size() - 1);
}

void fsdp_plan_tie(fsdp::plan::PlanModel& m, int user_unit, const char* alias, int owner_unit,
                   int owner_index, int* alias_index) {
  const std::size_t user = static_cast<std::size_t>(unit_index(m, user_unit, "user_unit"));
  const std::size_t owner = static_cast<std::size_t>(unit_index(m, owner_unit, "owner_unit"));
  const std::size_t nowner = m.units[owner].params.size();
  if (owner_index < 0 || static_cast<std::size_t>(owner_index) >= nowner)
    fail(Errc::OutOfRange, unit_label(m, owner) + ": owner_index = " + std::to_string(owner_index) +
                               ": the unit has " + std::to_string(nowner) + " parameters");
  if (!alias || !*alias) fail(Errc::InvalidArgument, "alias: NULL or empty");
  if (user == owner)
    fail(Errc::InvalidArgument,
         "owner_unit: the same unit as user_unit; a parameter used twice in one unit needs no "
         "tie");
  std::vector<std::string> aliases;
  for (const fsdp::plan::PlanTie& t : m.units[user].ties) aliases.push_back(t.alias);
  fsdp::check_tie_names(m.units[user].params, aliases, unit_label(m, user), alias,
                        !m.units[owner].ties.empty(), unit_label(m, owner));
  m.units[user].ties.push_back({alias, owner, static_cast<std::size_t>(owner_index)});
  if (alias_index)
    *alias_index = static_cast<int>(m.units[user].params.size() + m.units[user].ties.size() - 1);
}

void fsdp_plan_read_model(fsdp::plan::PlanModel& m, const char* path,
                          const fsdp_plan_model_format_t& format) {
  if (!path || !*path) fail(Errc::InvalidArgument, "path: NULL or empty");
  const int f = enum_int(format);
  if (f < 0 || f >= FSDP_PLAN_MODEL_FORMAT_COUNT)
    fail(Errc::InvalidArgument,
         "format = " + std::to_string(f) + ": not an fsdp_plan_model_format_t");
  if (!m.units.empty())
    fail(Errc::State, "plan: it has " + std::to_string(m.units.size()) +
                          " unit(s) already; read a model into an empty plan");
  switch (format) {
    case FSDP_PLAN_MODEL_JSON: m = fsdp::plan::model_from_layout_json(read_text(path), path); break;
    case FSDP_PLAN_MODEL_HF_CONFIG:
      m = fsdp::plan::model_from_hf_config(read_text(path), path);
      break;
    case FSDP_PLAN_MODEL_CHECKPOINT: {
      std::lock_guard<std::mutex> lock(fsdp::ckpt::hdf5_mutex());  // HDF5 is not thread-safe
      m = fsdp::plan::model_from_checkpoint(path);
      break;
    }
    case FSDP_PLAN_MODEL_FORMAT_COUNT: break;
  }
}

void fsdp_plan_memory(fsdp::plan::PlanModel& m, const fsdp_plan_job_t* job, int rank,
                      fsdp_plan_memory_t* memory) {
  const PlanJob j = read_job(job);
  fsdp::plan::place_rank(j, rank);
  fsdp::capi::write_sized(memory, to_c(fsdp::plan::plan_memory(m, j), kMemoryFields), "memory");
}

void fsdp_plan_traffic(fsdp::plan::PlanModel& m, const fsdp_plan_job_t* job, int rank,
                       fsdp_plan_traffic_t* traffic) {
  const fsdp::plan::TrafficPlan t = fsdp::plan::plan_traffic(m, read_job(job), rank);
  fsdp::capi::write_sized(traffic, to_c(t, kTrafficFields), "traffic");
}

void fsdp_plan_describe(fsdp::plan::PlanModel& m, const fsdp_plan_job_t* job, int rank, char* json,
                        size_t capacity, size_t* length) {
  copy_text(describe(m, read_job(job), rank, nullptr), json, capacity, length);
}

void fsdp_plan_describe_on(fsdp::plan::PlanModel& m, const fsdp_plan_job_t* job,
                           const fsdp_plan_machine_t* machine, int rank, char* json,
                           size_t capacity, size_t* length) {
  const fsdp::plan::Machine mach = read_machine(machine);
  copy_text(describe(m, read_job(job), rank, &mach), json, capacity, length);
}

void fsdp_plan_machine_preset(const char* name, fsdp_plan_machine_t* machine) {
  if (!name) fail(Errc::InvalidArgument, "name: NULL");
  const fsdp::plan::Machine m = fsdp::plan::machine_preset(name);
  fsdp_plan_machine_t c = FSDP_PLAN_MACHINE_INIT;
  copy_machine(c, m);
  fsdp::capi::write_sized(machine, c, "machine");
}

void fsdp_plan_time(fsdp::plan::PlanModel& m, const fsdp_plan_job_t* job,
                    const fsdp_plan_machine_t* machine, int rank, fsdp_plan_time_t* time) {
  const fsdp::plan::Machine mach = read_machine(machine);
  const StepTime t = fsdp::plan::plan_time(m, read_job(job), mach, rank);
  fsdp::capi::write_sized(time, to_c(t, kTimeFields), "time");
}

void fsdp_plan_sweep(fsdp::plan::PlanModel& m, const fsdp_plan_job_t* job,
                     const fsdp_plan_machine_t* machine, size_t budget_bytes, char* json,
                     size_t capacity, size_t* length) {
  const fsdp::plan::Machine mach = read_machine(machine);
  const PlanJob j = read_job(job);
  const std::size_t budget = budget_bytes ? budget_bytes : mach.hbm_bytes;
  copy_text(sweep_json(m, j, mach, budget), json, capacity, length);
}

}  // namespace fsdp::capi::body
