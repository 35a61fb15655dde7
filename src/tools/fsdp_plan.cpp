// fsdp-plan: what a job would hold per rank and move per training step, before it asks a
// scheduler for its GPUs (doc/planning.md). A command line over the C API alone (fsdp_plan_*):
// the model from a layout JSON, a Hugging Face config.json or a checkpoint, the job from the
// options; a table by default, fsdp_plan_describe's JSON with --json. Local: no MPI job needed.
// Errors: one line on stderr naming the option or the file's field, exit status 2, and nothing on
// stdout.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/human_bytes.hpp"
#include "base/json_reader.hpp"
#include "fsdp.h"

namespace {

const char* kUsage =
    "usage: fsdp-plan MODEL --world N --ranks-per-node R [options]\n"
    "  MODEL                      a layout JSON, a Hugging Face config.json (gpt2, llama,\n"
    "                             mistral, qwen2) or a libfsdp checkpoint (.h5)\n"
    "  --format layout|hf|checkpoint   what MODEL is (default: .h5 is a checkpoint; a JSON\n"
    "                             object with \"model_type\" a config.json, else a layout)\n"
    "  --world N                  ranks in the job\n"
    "  --ranks-per-node R         ranks per node (divides N)\n"
    "  --strategy full|hybrid|none     sharding strategy (default full)\n"
    "  --factor F                 sharding factor (default: the strategy's)\n"
    "  --hfsdp                    hybrid: gradient shards and optimizer state over the replicas\n"
    "                             too (doc/hfsdp.md)\n"
    "  --hpz                      a node-local secondary partition after forward (doc/hpz.md)\n"
    "  --param-dtype D            compute dtype: float32, float64, bfloat16, float16\n"
    "  --reduce-dtype D           gradient communication dtype (default: param dtype)\n"
    "  --optimizer sgd|adamw|none (default adamw)\n"
    "  --momentum M               SGD momentum (state exists when M > 0)\n"
    "  --amsgrad                  AdamW with AMSGrad (one more state buffer)\n"
    "  --max-unsharded K          at most K units unsharded at once (default 2)\n"
    "  --memory-space host|cuda   where the job computes (default: host; cuda with --machine);\n"
    "                             host plans the MPI transport, cuda NCCL\n"
    "  --cpu-offload              GPU job with shards, gradient shards and optimizer state in\n"
    "                             host memory\n"
    "  --batch B                  micro-batch per rank, in sequences (default 1)\n"
    "  --seq S                    tokens per sequence (default: the model's maximum)\n"
    "  --activation-checkpointing keep only each layer's input; recompute in backward\n"
    "  --activation-bytes-per-layer X   the caller's activation bytes per layer (replaces the\n"
    "                             transformer estimate)\n"
    "  --prefetch                 forward and backward prefetch (fsdp_set_prefetch(1, 1))\n"
    "  --machine NAME|FILE        a preset (a100-40gb-efa, a100-80gb-efa, a100-40gb-roce,\n"
    "                             a100-80gb-roce, h100-80gb-efa) or a JSON file (a path with a\n"
    "                             '/' or ending in .json) of every field of fsdp_plan_machine_t:\n"
    "                             adds the step time and whether it fits\n"
    "  --sweep                    the configurations that fit the budget, fastest first (needs\n"
    "                             --machine)\n"
    "  --budget BYTES             memory per rank for --sweep (default: the machine's HBM)\n"
    "  --top N                    the table of --sweep shows the N fastest (default 20; 0: all;\n"
    "                             --json lists all)\n"
    "  --rank r                   the rank to show (default 0)\n"
    "  --json                     fsdp_plan_describe's JSON (with --machine,\n"
    "                             fsdp_plan_describe_on's; with --sweep, fsdp_plan_sweep's)\n"
    "  -h, --help                 this text\n";

// The sweep table's rows unless --top says (kUsage says 20 too).
constexpr long long kSweepRows = 20;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check_call(fsdp_status_t st) {
  if (st != FSDP_SUCCESS) throw Failure(fsdp_last_error());
}

// ---- Options --------------------------------------------------------------------------------

long long whole(const std::string& option, const std::string& v, long long low, long long high) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < low || x > high)
    throw Failure(option + " " + v + ": expected a whole number from " + std::to_string(low) +
                  " to " + std::to_string(high));
  return x;
}

double real(const std::string& option, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw Failure(option + " " + v + ": expected a number");
  return x;
}

// The library's dtype names (base/dtype.hpp, whose values are fsdp_dtype_t's).
fsdp_dtype_t dtype(const std::string& option, const std::string& v) {
  std::string known;
  for (int k = 0; k < fsdp::kDTypeCount; ++k) {
    const char* name = fsdp::dtype_name(static_cast<fsdp::DType>(k));
    if (v == name) return static_cast<fsdp_dtype_t>(k);
    known += std::string(k ? ", " : "") + name;
  }
  throw Failure(option + " " + v + ": expected one of " + known);
}

// The optimizer kinds by the library's names (fsdp_optimizer_kind_info); "none": no optimizer.
bool optimizer(const std::string& v, fsdp_optimizer_kind_t* kind) {
  if (v == "none") return false;
  std::string known;
  for (int k = 0; k < FSDP_OPTIMIZER_KIND_COUNT; ++k) {
    const char* name = nullptr;
    check_call(fsdp_optimizer_kind_info(static_cast<fsdp_optimizer_kind_t>(k), &name, nullptr,
                                        nullptr, nullptr));
    if (v == name) return *kind = static_cast<fsdp_optimizer_kind_t>(k), true;
    known += std::string(name) + ", ";
  }
  throw Failure("--optimizer " + v + ": expected one of " + known + "none");
}

fsdp_sharding_strategy_t strategy(const std::string& v) {
  if (v == "full") return FSDP_FULL_SHARD;
  if (v == "hybrid") return FSDP_HYBRID_SHARD;
  if (v == "none") return FSDP_NO_SHARD;
  throw Failure("--strategy " + v + ": expected full, hybrid or none");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure(path + ": cannot read the file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// What MODEL is when --format is not given: a .h5 file is a checkpoint; a JSON object with
// "model_type" is a Hugging Face config.json; anything else is read as a layout (and refused by
// the library with the file's position if it is not one).
fsdp_plan_model_format_t guess_format(const std::string& path) {
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  if (ext == ".h5" || ext == ".hdf5") return FSDP_PLAN_MODEL_CHECKPOINT;
  try {
    if (fsdp::json::parse(read_file(path), path).find("model_type"))
      return FSDP_PLAN_MODEL_HF_CONFIG;
  } catch (const fsdp::Error&) {  // the library says what is wrong with it
  }
  return FSDP_PLAN_MODEL_JSON;
}

fsdp_plan_model_format_t format(const std::string& v) {
  if (v == "layout") return FSDP_PLAN_MODEL_JSON;
  if (v == "hf") return FSDP_PLAN_MODEL_HF_CONFIG;
  if (v == "checkpoint") return FSDP_PLAN_MODEL_CHECKPOINT;
  throw Failure("--format " + v + ": expected layout, hf or checkpoint");
}

// A preset by name, or a JSON file (a path with a '/' or ending in .json) of fsdp_plan_machine_t's
// fields (each required), checked by the library when it is used.
fsdp_plan_machine_t machine(const std::string& v) {
  fsdp_plan_machine_t m = FSDP_PLAN_MACHINE_INIT;
  if (v.find('/') == std::string::npos && v.find(".json") == std::string::npos) {
    if (fsdp_plan_machine_preset(v.c_str(), &m) != FSDP_SUCCESS)
      throw Failure("--machine " + v + ": " + fsdp_last_error());
    return m;
  }
  const fsdp::json::Value j = fsdp::json::parse(read_file(v), v);
  const struct {
    const char* key;
    double* to;
  } reals[] = {{"peak_flops_16bit", &m.peak_flops_16bit},
               {"peak_flops_32bit", &m.peak_flops_32bit},
               {"peak_flops_64bit", &m.peak_flops_64bit},
               {"intra_node_bandwidth", &m.intra_node_bandwidth},
               {"intra_node_latency_s", &m.intra_node_latency_s},
               {"inter_node_bandwidth", &m.inter_node_bandwidth},
               {"inter_node_latency_s", &m.inter_node_latency_s},
               {"host_device_bandwidth", &m.host_device_bandwidth},
               {"compute_efficiency", &m.compute_efficiency}};
  const auto number = [&](const char* key) {
    const fsdp::json::Value* x = j.find(key);
    if (!x || x->kind != fsdp::json::Value::Kind::Number)
      throw Failure("--machine " + v + ": \"" + key + "\": a number is required");
    return x->number;
  };
  for (const auto& r : reals) *r.to = number(r.key);
  const double hbm = number("hbm_bytes");
  if (hbm < 0 || hbm > 1e18 || hbm != static_cast<double>(static_cast<unsigned long long>(hbm)))
    throw Failure("--machine " + v + ": \"hbm_bytes\": a whole number of bytes is required");
  m.hbm_bytes = static_cast<size_t>(hbm);
  return m;
}

struct Args {
  std::string model;
  bool format_given = false;
  fsdp_plan_model_format_t format = FSDP_PLAN_MODEL_JSON;
  fsdp_config_t config = FSDP_CONFIG_INIT;
  bool stepped = true;  // the job steps an optimizer
  fsdp_hyperparams_t hyperparams{};
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;  // its config and hyperparams: see job_of
  int rank = 0;
  bool json = false;
  bool has_machine = false;
  std::string machine_name;
  fsdp_plan_machine_t machine = FSDP_PLAN_MACHINE_INIT;
  bool sweep = false;
  std::optional<long long> top;   // rows of the sweep's table
  unsigned long long budget = 0;  // 0: the machine's HBM
};

// The job, pointing at the options' config and hyperparameters.
fsdp_plan_job_t job_of(const Args& a) {
  fsdp_plan_job_t job = a.job;
  job.config = &a.config;
  job.hyperparams = a.stepped ? &a.hyperparams : nullptr;
  return job;
}

Args parse(int argc, char** argv) {
  Args a;
  // The transport the memory plan models (doc/planning-model.md); AUTO could pick another.
  a.config.transport = FSDP_TRANSPORT_MPI;
  bool world = false, per_node = false, momentum_given = false, amsgrad = false;
  std::string space;  // --memory-space
  double momentum = 0;
  std::string optimizer_name = "adamw";
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Failure(o + ": needs a value");
      return argv[++i];
    };
    if (o == "-h" || o == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else if (o == "--format") {
      a.format = format(value()), a.format_given = true;
    } else if (o == "--world") {
      a.job.world_size = static_cast<int>(whole(o, value(), 1, 1 << 30)), world = true;
    } else if (o == "--ranks-per-node") {
      a.job.ranks_per_node = static_cast<int>(whole(o, value(), 1, 1 << 30)), per_node = true;
    } else if (o == "--strategy") {
      a.config.strategy = strategy(value());
    } else if (o == "--factor") {
      a.config.sharding_factor = static_cast<int>(whole(o, value(), 1, 1 << 30));
    } else if (o == "--param-dtype") {
      a.config.param_dtype = dtype(o, value());
    } else if (o == "--reduce-dtype") {
      a.config.reduce_dtype = dtype(o, value());
    } else if (o == "--optimizer") {
      optimizer_name = value();
    } else if (o == "--momentum") {
      momentum = real(o, value()), momentum_given = true;
    } else if (o == "--amsgrad") {
      amsgrad = true;
    } else if (o == "--max-unsharded") {
      a.config.max_unsharded = static_cast<int>(whole(o, value(), 1, 1 << 30));
    } else if (o == "--memory-space") {
      const std::string v = value();
      if (v != "host" && v != "cuda")
        throw Failure("--memory-space " + v + ": expected host or cuda");
      space = v;
    } else if (o == "--cpu-offload") {
      a.config.cpu_offload = 1;
    } else if (o == "--hfsdp") {
      a.config.hfsdp = 1;
    } else if (o == "--hpz") {
      a.config.hpz = 1;
    } else if (o == "--batch") {
      a.job.batch_size = static_cast<int>(whole(o, value(), 1, (1 << 30)));
    } else if (o == "--seq") {
      a.job.sequence_length = static_cast<int>(whole(o, value(), 1, (1 << 30)));
    } else if (o == "--activation-checkpointing") {
      a.job.activation_checkpointing = 1;
    } else if (o == "--activation-bytes-per-layer") {
      a.job.activation_bytes_per_layer = whole(o, value(), 1, 1LL << 62);
    } else if (o == "--prefetch") {
      a.job.prefetch_forward = a.job.prefetch_backward = 1;
    } else if (o == "--machine") {
      a.machine_name = value();
      a.machine = machine(a.machine_name);
      a.has_machine = true;
    } else if (o == "--sweep") {
      a.sweep = true;
    } else if (o == "--top") {
      a.top = whole(o, value(), 0, 1LL << 30);
    } else if (o == "--budget") {
      a.budget = static_cast<unsigned long long>(whole(o, value(), 1, 1LL << 62));
    } else if (o == "--rank") {
      a.rank = static_cast<int>(whole(o, value(), 0, (1 << 30) - 1));
    } else if (o == "--json") {
      a.json = true;
    } else if (!o.empty() && o[0] == '-') {
      throw Failure(o + ": unknown option (fsdp-plan --help)");
    } else if (a.model.empty()) {
      a.model = o;
    } else {
      throw Failure(o + ": a second MODEL (the first is " + a.model + ")");
    }
  }
  if (a.model.empty()) throw Failure(std::string("no MODEL given\n") + kUsage);
  if (!world) throw Failure("--world: required (the job's number of ranks)");
  if (!per_node) throw Failure("--ranks-per-node: required (ranks on each node)");
  if (!a.format_given) a.format = guess_format(a.model);
  if (a.sweep && !a.has_machine) throw Failure("--sweep: needs --machine (the step time ranks it)");
  if (a.budget && !a.sweep) throw Failure("--budget: only with --sweep");
  if (a.top && !a.sweep) throw Failure("--top: only with --sweep");
  if (space.empty()) space = a.has_machine || a.config.cpu_offload ? "cuda" : "host";
  if (space == "host" && a.config.cpu_offload)
    throw Failure("--cpu-offload: offloads from a GPU (--memory-space cuda)");
  if (space == "cuda")
    a.config.memory_space = FSDP_MEMORY_CUDA, a.config.transport = FSDP_TRANSPORT_NCCL;
  fsdp_optimizer_kind_t kind = FSDP_OPTIMIZER_ADAMW;
  a.stepped = optimizer(optimizer_name, &kind);
  if ((momentum_given || amsgrad) && !a.stepped)
    throw Failure(std::string(momentum_given ? "--momentum" : "--amsgrad") +
                  ": needs an optimizer (--optimizer none)");
  a.job.no_optimizer = a.stepped ? 0 : 1;
  a.job.optimizer = kind;
  if (a.stepped) {
    a.hyperparams.size = sizeof a.hyperparams;
    check_call(fsdp_optimizer_defaults(kind, &a.hyperparams));
    if (momentum_given) a.hyperparams.momentum = momentum;
    if (amsgrad) a.hyperparams.amsgrad = 1;
  }
  return a;
}

// ---- Output ---------------------------------------------------------------------------------

std::string grouped(unsigned long long n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

void row(const char* what, unsigned long long bytes) {
  std::printf("  %-34s %12s  %22s\n", what, fsdp::human_bytes(bytes, 2).c_str(),
              grouped(bytes).c_str());
}

const char* format_name(fsdp_plan_model_format_t f) {
  switch (f) {
    case FSDP_PLAN_MODEL_JSON: return "layout JSON";
    case FSDP_PLAN_MODEL_CHECKPOINT: return "checkpoint";
    case FSDP_PLAN_MODEL_HF_CONFIG: return "Hugging Face config.json";
    default: return "?";
  }
}

void table(const Args& a, const fsdp::json::Value& d, const fsdp_plan_memory_t* m,
           const std::string& memory_refusal, const fsdp_plan_traffic_t& t) {
  unsigned long long params = 0;
  for (const auto& u : d["units"].items)
    params += static_cast<unsigned long long>(u["numel"].number);
  std::printf("model:  %s (%s): %zu units, %s parameters\n", a.model.c_str(), format_name(a.format),
              d["units"].items.size(), grouped(params).c_str());
  const int world = a.job.world_size, per_node = a.job.ranks_per_node;
  std::printf(
      "job:    %d ranks, %d per node (%d nodes), %s; sharding factor %lld, %lld replica(s)\n",
      world, per_node, world / per_node,
      a.config.memory_space == FSDP_MEMORY_HOST ? "host memory, MPI transport"
      : a.config.cpu_offload                    ? "CUDA memory with CPU offload, NCCL"
                                                : "CUDA memory, NCCL",
      d["sharding_factor"].integer(), d["replicas"].integer());
  std::printf("rank:   %d\n\n", a.rank);
  std::printf("%-51s%22s\n", "memory per rank over a training step", "bytes");
  if (m) {
    row("parameter shards", m->shard_bytes);
    row("gradient shards", m->grad_shard_bytes);
    row("optimizer state", m->optimizer_state_bytes);
    row("peak unsharded parameters", m->peak_unsharded_bytes);
    row("peak full gradients", m->peak_full_grad_bytes);
    row("peak parameters (shards+unsharded)", m->peak_parameter_bytes);
    row("pool cached after the step", m->pool_cached_bytes);
    row("communication scratch", m->scratch_bytes);
    row("peak total", m->peak_bytes);
    row("(the model unsharded)", m->unsharded_model_bytes);
    if (a.config.hpz) row("hpZ secondary partitions, peak", m->peak_secondary_bytes);
    row("activations (not in memory stats)", m->activation_bytes);
    if (a.config.memory_space == FSDP_MEMORY_CUDA) row("device total", m->device_total_bytes);
    if (a.config.memory_space == FSDP_MEMORY_HOST || a.config.cpu_offload)
      row("host total", m->host_total_bytes);
  } else {
    std::printf("  not planned: %s\n", memory_refusal.c_str());
  }
  std::printf("\n%-37s%12s  %22s\n", "traffic per rank per training step", "calls", "bytes");
  auto line = [](const char* what, unsigned long long calls, unsigned long long bytes) {
    std::printf("  %-34s %12s  %22s  (%s)\n", what, grouped(calls).c_str(), grouped(bytes).c_str(),
                fsdp::human_bytes(bytes, 2).c_str());
  };
  line("all-gather", t.all_gather_calls, t.all_gather_bytes);
  line("reduce-scatter", t.reduce_scatter_calls, t.reduce_scatter_bytes);
  line("all-reduce", t.all_reduce_calls, t.all_reduce_bytes);
  if (a.config.hfsdp) {
    line("reduce-scatter across replicas", t.replica_reduce_scatter_calls,
         t.replica_reduce_scatter_bytes);
    line("all-gather across replicas", t.replica_all_gather_calls, t.replica_all_gather_bytes);
  }
  if (a.config.hpz)
    line("all-gather inside the node (hpZ)", t.node_all_gather_calls, t.node_all_gather_bytes);
  std::printf("  %-34s %12s  %22s  (%s)\n", "sent inside the node", "",
              grouped(t.intra_node_bytes).c_str(),
              fsdp::human_bytes(t.intra_node_bytes, 2).c_str());
  std::printf("  %-34s %12s  %22s  (%s)\n", "sent to other nodes", "",
              grouped(t.inter_node_bytes).c_str(),
              fsdp::human_bytes(t.inter_node_bytes, 2).c_str());
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf,
                s < 1e-3 ? "%.1f us"
                : s < 1  ? "%.2f ms"
                         : "%.3f s",
                s < 1e-3 ? s * 1e6
                : s < 1  ? s * 1e3
                         : s);
  return buf;
}

// The description's "time" and "fits" (fsdp_plan_describe_on).
void time_table(const Args& a, const fsdp::json::Value& d) {
  const fsdp::json::Value& t = d["time"];
  std::printf("\nstep time on %s (doc/planning-model.md)\n", a.machine_name.c_str());
  const struct {
    const char* what;
    const char* key;
  } rows[] = {{"computation", "compute_s"},
              {"all-gathers", "all_gather_s"},
              {"reduce-scatters", "reduce_scatter_s"},
              {"all-reduces", "all_reduce_s"},
              {"CPU offload copies", "offload_copy_s"},
              {"exposed communication", "exposed_comm_s"},
              {"step", "step_s"}};
  for (const auto& r : rows)
    std::printf("  %-34s %12s\n", r.what, seconds(t[r.key].number).c_str());
  std::printf("  %-34s %12.1f\n", "TFLOPS per GPU", t["tflops_per_gpu"].number);
  std::printf("  %-34s %12.0f\n", "tokens per second per GPU",
              t["tokens_per_step"].number / t["step_s"].number);
  const fsdp::json::Value& fits = d["fits"];
  if (fits.kind == fsdp::json::Value::Kind::Bool)
    std::printf("  %-34s %12s  (HBM %s)\n", "fits", fits.boolean ? "yes" : "no",
                fsdp::human_bytes(a.machine.hbm_bytes, 2).c_str());
}

std::string sweep_text(fsdp_plan_t plan, const Args& a, const fsdp_plan_job_t& job) {
  size_t length = 0;
  check_call(fsdp_plan_sweep(plan, &job, &a.machine, a.budget, nullptr, 0, &length));
  std::string text(length + 1, '\0');
  check_call(fsdp_plan_sweep(plan, &job, &a.machine, a.budget, &text[0], text.size(), &length));
  text.resize(length);
  return text;
}

void sweep_table(const Args& a, const fsdp::json::Value& s) {
  const auto& configs = s["configurations"].items;
  std::printf(
      "configurations of %s on %d ranks (%d per node) that fit %s per rank on %s, "
      "fastest first: %zu\n",
      a.model.c_str(), a.job.world_size, a.job.ranks_per_node,
      fsdp::human_bytes(static_cast<unsigned long long>(s["budget_bytes"].number), 2).c_str(),
      a.machine_name.c_str(), configs.size());
  std::printf("%-13s %5s %-9s %4s %7s %6s %12s %12s %12s %10s %9s %8s\n", "strategy", "F", "dtype",
              "ckpt", "offload", "batch", "device", "host", "step", "exposed", "TFLOPS", "tok/s");
  const auto top = static_cast<std::size_t>(a.top.value_or(kSweepRows));
  const std::size_t shown = top == 0 ? configs.size() : std::min(configs.size(), top);
  for (std::size_t k = 0; k < shown; ++k) {
    const auto& c = configs[k];
    const auto& m = c["memory"];
    const std::string strategy = c["strategy"].text + (c["hfsdp"].boolean ? "+HFSDP" : "") +
                                 (c["hpz"].boolean ? "+hpZ" : "");
    std::printf(
        "%-13s %5lld %-9s %4s %7s %6lld %12s %12s %12s %10s %9.1f %8.0f\n", strategy.c_str(),
        c["sharding_factor"].integer(), c["param_dtype"].text.c_str(),
        c["activation_checkpointing"].boolean ? "on" : "off",
        c["cpu_offload"].boolean ? "on" : "off", c["batch_size"].integer(),
        fsdp::human_bytes(static_cast<unsigned long long>(m["device_total_bytes"].number), 2)
            .c_str(),
        fsdp::human_bytes(static_cast<unsigned long long>(m["host_total_bytes"].number), 2).c_str(),
        seconds(c["time"]["step_s"].number).c_str(),
        seconds(c["time"]["exposed_comm_s"].number).c_str(), c["time"]["tflops_per_gpu"].number,
        c["tokens_per_s"].number);
  }
  if (shown < configs.size())
    std::printf("... and %zu slower (--top 0 lists all)\n", configs.size() - shown);
}

// The plan's description of `rank`, as fsdp_plan_describe (or with a machine,
// fsdp_plan_describe_on) writes it.
std::string describe(fsdp_plan_t plan, const fsdp_plan_job_t& job, const Args& a) {
  const auto call = [&](char* json, size_t capacity, size_t* length) {
    return a.has_machine
               ? fsdp_plan_describe_on(plan, &job, &a.machine, a.rank, json, capacity, length)
               : fsdp_plan_describe(plan, &job, a.rank, json, capacity, length);
  };
  size_t length = 0;
  check_call(call(nullptr, 0, &length));
  std::string text(length + 1, '\0');
  check_call(call(&text[0], text.size(), &length));
  text.resize(length);
  return text;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  fsdp_plan_t plan = nullptr;
  check_call(fsdp_plan_create(&plan));
  struct Destroy {
    fsdp_plan_t* p;
    ~Destroy() { fsdp_plan_destroy(p); }
  } destroy{&plan};
  check_call(fsdp_plan_read_model(plan, a.model.c_str(), a.format));
  // Every figure is computed before anything is printed: a refusal prints no partial plan.
  const fsdp_plan_job_t job = job_of(a);
  if (a.sweep) {
    const std::string text = sweep_text(plan, a, job);
    if (a.json)
      std::printf("%s\n", text.c_str());
    else
      sweep_table(a, fsdp::json::parse(text, "fsdp_plan_sweep"));
    return 0;
  }
  const std::string text = describe(plan, job, a);
  fsdp_plan_traffic_t traffic{};
  traffic.size = sizeof traffic;
  check_call(fsdp_plan_traffic(plan, &job, a.rank, &traffic));
  fsdp_plan_memory_t memory{};
  memory.size = sizeof memory;
  std::string memory_refusal;
  const fsdp_status_t st = fsdp_plan_memory(plan, &job, a.rank, &memory);
  if (st == FSDP_ERR_UNSUPPORTED) {
    memory_refusal = fsdp_last_error();
  } else {
    check_call(st);
  }
  if (a.json) {
    std::printf("%s\n", text.c_str());
    return 0;
  }
  const fsdp::json::Value d = fsdp::json::parse(text, "fsdp_plan_describe");
  table(a, d, memory_refusal.empty() ? &memory : nullptr, memory_refusal, traffic);
  if (a.has_machine) time_table(a, d);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-plan: error: %s\n", e.what());
    return 2;
  }
}
