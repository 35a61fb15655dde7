// fsdp-plan: what a job would hold per rank and move per training step, before it asks a
// scheduler for its GPUs (doc/planning.md). A command line over the C API alone (fsdp_plan_*):
// the model from a layout JSON, a Hugging Face config.json or a checkpoint, the job from the
// options; a table by default, fsdp_plan_describe's JSON with --json. Local: no MPI job needed.
// Errors: one line on stderr naming the option or the file's field, exit status 2, and nothing on
// stdout.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/dtype.hpp"
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
    "  --param-dtype D            compute dtype: float32, float64, bfloat16, float16\n"
    "  --reduce-dtype D           gradient communication dtype (default: param dtype)\n"
    "  --optimizer sgd|adamw|none (default adamw)\n"
    "  --momentum M               SGD momentum (state exists when M > 0)\n"
    "  --amsgrad                  AdamW with AMSGrad (one more state buffer)\n"
    "  --max-unsharded K          at most K units unsharded at once (default 2)\n"
    "  --cpu-offload              GPU job with shards, gradient shards and optimizer state in\n"
    "                             host memory\n"
    "  --rank r                   the rank to show (default 0)\n"
    "  --json                     fsdp_plan_describe's JSON instead of the table\n"
    "  -h, --help                 this text\n";

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
    } else if (o == "--cpu-offload") {
      a.config.memory_space = FSDP_MEMORY_CUDA, a.config.cpu_offload = 1;
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

std::string human(unsigned long long bytes) {
  char buf[32];
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

void row(const char* what, unsigned long long bytes) {
  std::printf("  %-34s %12s  %22s\n", what, human(bytes).c_str(), grouped(bytes).c_str());
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
      "job:    %d ranks, %d per node (%d nodes), MPI transport; sharding factor %lld, "
      "%lld replica(s)\n",
      world, per_node, world / per_node, d["sharding_factor"].integer(), d["replicas"].integer());
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
  } else {
    std::printf("  not planned: %s\n", memory_refusal.c_str());
  }
  std::printf("\n%-37s%12s  %22s\n", "traffic per rank per training step", "calls", "bytes");
  auto line = [](const char* what, unsigned long long calls, unsigned long long bytes) {
    std::printf("  %-34s %12s  %22s  (%s)\n", what, grouped(calls).c_str(), grouped(bytes).c_str(),
                human(bytes).c_str());
  };
  line("all-gather", t.all_gather_calls, t.all_gather_bytes);
  line("reduce-scatter", t.reduce_scatter_calls, t.reduce_scatter_bytes);
  line("all-reduce", t.all_reduce_calls, t.all_reduce_bytes);
  std::printf("  %-34s %12s  %22s  (%s)\n", "sent inside the node", "",
              grouped(t.intra_node_bytes).c_str(), human(t.intra_node_bytes).c_str());
  std::printf("  %-34s %12s  %22s  (%s)\n", "sent to other nodes", "",
              grouped(t.inter_node_bytes).c_str(), human(t.inter_node_bytes).c_str());
}

// The plan's description of `rank`, as fsdp_plan_describe writes it.
std::string describe(fsdp_plan_t plan, const fsdp_plan_job_t& job, int rank) {
  size_t length = 0;
  check_call(fsdp_plan_describe(plan, &job, rank, nullptr, 0, &length));
  std::string text(length + 1, '\0');
  check_call(fsdp_plan_describe(plan, &job, rank, &text[0], text.size(), &length));
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
  const std::string text = describe(plan, job, a.rank);
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
  table(a, fsdp::json::parse(text, "fsdp_plan_describe"),
        memory_refusal.empty() ? &memory : nullptr, memory_refusal, traffic);
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
