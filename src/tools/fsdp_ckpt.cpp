// fsdp-ckpt: inspect, verify, compare and convert libfsdp checkpoints without a training program.
// A command line over the C API alone (fsdp_checkpoint_describe, fsdp_checkpoint_verify,
// fsdp_checkpoint_diff, fsdp_safetensors_export and _import), so that one process holds one copy
// of the checkpoint code. Runs alone or under mpiexec (each rank then handles a share of every
// dataset). Memory stays bounded whatever the checkpoint's size. Errors: one line on stderr, exit
// status 2; `diff` exits 1 when the checkpoints differ, `verify` when a checksum fails.
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/human_bytes.hpp"
#include "base/json_reader.hpp"
#include "fsdp.h"

using Json = fsdp::json::Value;

namespace {

int g_rank = 0, g_size = 1;

const char* kUsage =
    "usage: fsdp-ckpt <command> ...\n"
    "  info FILE                      parameters, shapes, dtypes, sizes, metadata, optimizers\n"
    "  verify FILE [--progress]       check every dataset's crc32c\n"
    "  diff A B [--model-only]        max abs/rel difference per parameter and optimizer state,\n"
    "                                 and which metadata, hyperparameters or scaler differ\n"
    "  export FILE --to OUT.safetensors [--dtype bf16|fp16|fp32|fp64]\n"
    "  export FILE --to DIR --max-shard-size 5GB [--dtype ...]   Hugging Face sharded layout:\n"
    "                                 model-0000k-of-0000n.safetensors + index.json\n"
    "  import IN.safetensors|DIR|INDEX.json --to OUT.h5 [--dtype fp32|fp64]\n"
    "  -h, --help                     this text (also after a command)\n"
    "Runs under mpiexec too: each rank then reads and writes a share of every dataset.\n";

// A usage error or a failed C call: one line on stderr, exit status 2. The same on every rank
// (the arguments are, and the collective calls return one status everywhere): rank 0 prints it.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check_call(fsdp_status_t st) {
  if (st != FSDP_SUCCESS) throw Failure(fsdp_last_error());
}

// Bytes per element of the dtypes a checkpoint stores, by fsdp_checkpoint_describe's names
// (base/dtype.hpp's).
uint64_t dtype_bytes(const std::string& name) {
  for (int k = 0; k < fsdp::kDTypeCount; ++k) {
    const auto t = static_cast<fsdp::DType>(k);
    if (name == fsdp::dtype_name(t)) return fsdp::dtype_size(t);
  }
  throw Failure("checkpoint description: unknown dtype '" + name + "'");
}

// The hyperparameters the optimizer kind named `kind` (as checkpoints name it) reads, as the
// library says (fsdp_optimizer_kind_info, fsdp_optimizer_hyperparam_name).
std::vector<std::string> hyperparams_read(const std::string& kind) {
  for (int k = 0; k < FSDP_OPTIMIZER_KIND_COUNT; ++k) {
    const auto code = static_cast<fsdp_optimizer_kind_t>(k);
    const char* name = nullptr;
    int n = 0;
    check_call(fsdp_optimizer_kind_info(code, &name, nullptr, &n, nullptr));
    if (kind != name) continue;
    std::vector<std::string> fields(static_cast<std::size_t>(n));
    for (int f = 0; f < n; ++f) {
      const char* field = nullptr;
      check_call(fsdp_optimizer_hyperparam_name(code, f, &field));
      fields[static_cast<std::size_t>(f)] = field;
    }
    return fields;
  }
  throw Failure("checkpoint description: unknown optimizer kind '" + kind + "'");
}

// Report lines of the C calls, on rank 0: to stdout.
void print_line(const char* line, void*) {
  std::printf("%s\n", line);
}

// ---- Commands --------------------------------------------------------------------------------

int info(const std::string& path) {
  size_t length = 0;
  check_call(fsdp_checkpoint_describe(path.c_str(), nullptr, 0, &length));
  std::string text(length + 1, '\0');
  check_call(fsdp_checkpoint_describe(path.c_str(), &text[0], text.size(), &length));
  text.resize(length);
  if (g_rank != 0) return 0;
  const Json c = fsdp::json::parse(text, "checkpoint description");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Failure("cannot stat '" + path + "'");
  std::printf("file:            %s (%s)\n", path.c_str(),
              fsdp::human_bytes(static_cast<uint64_t>(st.st_size)).c_str());
  std::printf("format:          fsdp-checkpoint version %lld, written by libfsdp %s on %s\n",
              c["format_version"].integer(), c["library_version"].text.c_str(),
              c["created"].text.c_str());
  std::printf("saved with:      %lld ranks, strategy %s, sharding factor %lld\n",
              c["world_size"].integer(), c["strategy"].text.c_str(),
              c["sharding_factor"].integer());
  for (const auto& [k, v] : c["metadata"].fields)
    std::printf("metadata:        %s = %s\n", k.c_str(), v.text.c_str());
  const Json& s = c["grad_scaler"];
  if (s.kind == Json::Kind::Object)
    std::printf("grad scaler:     scale %g, growth %g every %lld steps (%lld so far), backoff %g\n",
                s["scale"].number, s["growth_factor"].number, s["growth_interval"].integer(),
                s["growth_tracker"].integer(), s["backoff_factor"].number);
  // Bytes of each parameter: its optimizer state has the same shape and dtype.
  std::map<std::string, uint64_t> param_bytes;
  uint64_t params = 0, bytes = 0;
  for (const Json& p : c["params"].items) {
    uint64_t numel = 1;
    for (const Json& d : p["shape"].items) numel *= static_cast<uint64_t>(d.integer());
    param_bytes[p["name"].text] = numel * dtype_bytes(p["dtype"].text);
    params += numel, bytes += param_bytes[p["name"].text];
  }
  uint64_t total = bytes;
  const std::vector<Json>& optimizers = c["optimizers"].items;
  for (std::size_t k = 0; k < optimizers.size(); ++k) {
    const Json& o = optimizers[k];
    std::printf("optimizer %zu:     %s, %zu group(s)", k, o["kind"].text.c_str(),
                o["groups"].items.size());
    for (const auto& [state, of] : o["state"].fields) {
      std::printf(", %s for %zu parameters", state.c_str(), of.fields.size());
      for (const auto& [name, ignored] : of.fields) total += param_bytes[name];
    }
    std::printf("\n");
    const std::vector<std::string> reads = hyperparams_read(o["kind"].text);
    for (std::size_t g = 0; g < o["groups"].items.size(); ++g) {
      const Json& gr = o["groups"].items[g];
      std::printf("  group %zu '%s':", g, gr["pattern"].text.c_str());
      for (std::size_t f = 0; f < reads.size(); ++f) {
        const Json& v = gr[reads[f]];
        if (v.kind == Json::Kind::Bool)
          std::printf("%s %s %s", f ? "," : "", reads[f].c_str(), v.boolean ? "true" : "false");
        else
          std::printf("%s %s %g", f ? "," : "", reads[f].c_str(), v.number);
      }
      std::printf("\n");
    }
  }
  std::printf("%-40s %-8s %-20s %12s\n", "parameter", "dtype", "shape", "bytes");
  for (const Json& p : c["params"].items) {
    std::string shape = "[";
    for (std::size_t i = 0; i < p["shape"].items.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(p["shape"].items[i].integer());
    shape += "]";
    std::printf("%-40s %-8s %-20s %12llu\n", p["name"].text.c_str(), p["dtype"].text.c_str(),
                shape.c_str(), static_cast<unsigned long long>(param_bytes[p["name"].text]));
  }
  std::printf("%zu parameters, %llu elements, %s of values (%s with optimizer state)\n",
              c["params"].items.size(), static_cast<unsigned long long>(params),
              fsdp::human_bytes(bytes).c_str(), fsdp::human_bytes(total).c_str());
  return 0;
}

// The progress bar on stderr: asked for, or on a terminal for checkpoints over 64 MiB.
struct ProgressBar {
  bool asked = false, drawn = false;
};

void draw_progress(uint64_t done, uint64_t total, void* user) {
  auto& bar = *static_cast<ProgressBar*>(user);
  if (!bar.asked && !(isatty(2) && total > (uint64_t{64} << 20))) return;
  const int pct = total ? static_cast<int>(100 * done / total) : 100;
  std::fprintf(stderr, "\rverify: [%-40s] %3d%% %s", std::string(pct * 40 / 100, '#').c_str(), pct,
               fsdp::human_bytes(done).c_str());
  bar.drawn = true;
}

int verify(const std::string& path, bool progress) {
  ProgressBar bar{progress};
  fsdp_checkpoint_check_options_t o = FSDP_CHECKPOINT_CHECK_OPTIONS_INIT;
  o.report = print_line;
  o.progress = draw_progress;
  o.user = &bar;
  int failed = 0;
  const fsdp_status_t st = fsdp_checkpoint_verify(MPI_COMM_WORLD, path.c_str(), &o, &failed);
  if (g_rank == 0 && (bar.drawn || progress)) std::fprintf(stderr, "\n");
  check_call(st);
  return failed;
}

int diff(const std::string& a, const std::string& b, bool model_only) {
  fsdp_checkpoint_check_options_t o = FSDP_CHECKPOINT_CHECK_OPTIONS_INIT;
  o.model_only = model_only ? 1 : 0;
  o.report = print_line;
  int differ = 0;
  check_call(fsdp_checkpoint_diff(MPI_COMM_WORLD, a.c_str(), b.c_str(), &o, &differ));
  return differ;
}

// --dtype names: bf16, fp16, fp32, fp64.
fsdp_dtype_t dtype_flag(const std::string& s) {
  if (s.empty()) return FSDP_DTYPE_AUTO;
  if (s == "bf16") return FSDP_BFLOAT16;
  if (s == "fp16") return FSDP_FLOAT16;
  if (s == "fp32") return FSDP_FLOAT32;
  if (s == "fp64") return FSDP_FLOAT64;
  throw Failure("--dtype " + s + ": expected bf16, fp16, fp32 or fp64");
}

// --max-shard-size: bytes, or a number with KB/MB/GB (powers of 1000) or KiB/MiB/GiB (of 1024),
// as transformers' max_shard_size reads it.
uint64_t shard_size_flag(const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  const std::map<std::string, double> units = {{"", 1},
                                               {"B", 1},
                                               {"KB", 1e3},
                                               {"MB", 1e6},
                                               {"GB", 1e9},
                                               {"TB", 1e12},
                                               {"KiB", 1024.0},
                                               {"MiB", 1048576.0},
                                               {"GiB", 1073741824.0},
                                               {"TiB", 1099511627776.0}};
  const auto u = units.find(unit);
  if (used == 0 || u == units.end() || !(v > 0) || v * u->second >= 1.8e19)
    throw Failure("--max-shard-size " + s +
                  ": expected a positive size such as 5GB, 500MB or 2GiB");
  return static_cast<uint64_t>(v * u->second);
}

int export_safetensors(const std::string& path, const std::string& out, const std::string& dt,
                       const std::string& max_shard) {
  fsdp_safetensors_options_t o = FSDP_SAFETENSORS_OPTIONS_INIT;
  o.dtype = dtype_flag(dt);
  if (!max_shard.empty()) o.max_shard_bytes = shard_size_flag(max_shard);
  check_call(fsdp_safetensors_export(MPI_COMM_WORLD, path.c_str(), out.c_str(), &o));
  if (g_rank == 0) std::printf("exported %s to %s\n", path.c_str(), out.c_str());
  return 0;
}

int import_safetensors(const std::string& in, const std::string& out, const std::string& dt) {
  fsdp_safetensors_options_t o = FSDP_SAFETENSORS_OPTIONS_INIT;
  o.dtype = dtype_flag(dt);
  check_call(fsdp_safetensors_import(MPI_COMM_WORLD, in.c_str(), out.c_str(), &o));
  if (g_rank == 0) std::printf("imported %s into %s\n", in.c_str(), out.c_str());
  return 0;
}

// Options after the command: --to X, --dtype Y, --max-shard-size Z, --progress, --model-only,
// -h/--help.
struct Args {
  std::vector<std::string> positional;
  std::string to, dtype, max_shard;
  bool progress = false, model_only = false, help = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    if ((s == "--to" || s == "--dtype" || s == "--max-shard-size") && i + 1 < argc)
      (s == "--to" ? a.to : s == "--dtype" ? a.dtype : a.max_shard) = argv[++i];
    else if (s == "--progress")
      a.progress = true;
    else if (s == "--model-only")
      a.model_only = true;
    else if (s == "-h" || s == "--help")
      a.help = true;
    else if (s.rfind("--", 0) == 0)
      throw Failure("unknown option '" + s + "'\n" + kUsage);
    else
      a.positional.push_back(s);
  }
  return a;
}

int run(int argc, char** argv) {
  if (argc < 2) throw Failure(std::string("no command\n") + kUsage);
  const std::string cmd = argv[1];
  const bool tool_help = cmd == "-h" || cmd == "--help" || cmd == "help";
  if (!tool_help && !std::set<std::string>{"info", "verify", "diff", "export", "import"}.count(cmd))
    throw Failure("unknown command '" + cmd + "'\n" + kUsage);
  const Args a = tool_help ? Args{} : parse(argc, argv);
  if (tool_help || a.help) {  // of the tool or of a command: to stdout, and a success
    if (g_rank == 0) std::printf("%s", kUsage);
    return 0;
  }
  auto need = [&](std::size_t n, bool to) {
    if (a.positional.size() != n || (to && a.to.empty()))
      throw Failure("wrong arguments for '" + cmd + "'\n" + kUsage);
  };
  if (cmd == "info") return need(1, false), info(a.positional[0]);
  if (cmd == "verify") return need(1, false), verify(a.positional[0], a.progress);
  if (cmd == "diff") return need(2, false), diff(a.positional[0], a.positional[1], a.model_only);
  if (cmd == "export")
    return need(1, true), export_safetensors(a.positional[0], a.to, a.dtype, a.max_shard);
  return need(1, true), import_safetensors(a.positional[0], a.to, a.dtype);  // import
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int status = 0;
  try {
    status = run(argc, argv);
  } catch (const Failure& e) {
    if (g_rank == 0) std::fprintf(stderr, "fsdp-ckpt: error: %s\n", e.what());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-ckpt: error: %s\n", e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
