// fsdp-ckpt: inspect, verify, compare and convert libfsdp checkpoints without a training program.
// Runs alone or under mpiexec (each rank then handles a share of every dataset). Memory stays
// bounded (16 MiB chunks per rank) whatever the checkpoint's size. Errors: one line on stderr,
// exit status 2; `diff` exits 1 when the checkpoints differ, `verify` when a checksum fails.
#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/agreement.hpp"
#include "base/crc32c.hpp"
#include "base/error.hpp"
#include "base/mpi_check.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/from_rank0.hpp"
#include "checkpoint/partial_checksums.hpp"
#include "checkpoint/posix_file.hpp"
#include "checkpoint/writer.hpp"
#include "fsdp.h"

using namespace fsdp;
using namespace fsdp::ckpt;

namespace {

int g_rank = 0, g_size = 1;
constexpr uint64_t kChunkBytes = uint64_t{16} << 20;

const char* kUsage =
    "usage: fsdp-ckpt <command> ...\n"
    "  info FILE                      parameters, shapes, dtypes, sizes, metadata, layout\n"
    "  verify FILE [--progress]       check every dataset's crc32c\n"
    "  diff A B [--model-only]        max abs/rel difference per parameter and optimizer state,\n"
    "                                 and which metadata, hyperparameters or scaler differ\n"
    "  export FILE --to OUT.safetensors [--dtype bf16|fp16|fp32|fp64]\n"
    "  export FILE --to DIR --max-shard-size 5GB [--dtype ...]   Hugging Face sharded layout:\n"
    "                                 model-0000k-of-0000n.safetensors + index.json\n"
    "  import IN.safetensors|DIR|INDEX.json --to OUT.h5 [--dtype fp32|fp64]\n"
    "  -h, --help                     this text (also after a command)\n"
    "Runs under mpiexec too: each rank then reads and writes a share of every dataset.\n";

// ---- Small helpers ---------------------------------------------------------------------------

// Rank 0 reads the catalog; every rank gets it (or the same error).
Catalog shared_catalog(const std::string& path,
                       ckpt::CatalogSource source = ckpt::CatalogSource::Index) {
  return ckpt::shared_catalog(MPI_COMM_WORLD, path, source);
}

// This rank's element range of a dataset of n elements.
std::pair<uint64_t, uint64_t> my_range(uint64_t n) {
  return {n * static_cast<uint64_t>(g_rank) / static_cast<uint64_t>(g_size),
          n * static_cast<uint64_t>(g_rank + 1) / static_cast<uint64_t>(g_size)};
}

// Streams elements [first, last) of a dataset in chunks: fn(first_element, count, bytes).
void for_chunks(const PosixFile& f, const DatasetInfo& d, uint64_t first, uint64_t last,
                const std::function<void(uint64_t, uint64_t, const char*)>& fn) {
  const std::size_t es = dtype_size(d.dtype);
  std::vector<char> buf(std::min<uint64_t>(kChunkBytes, (last - first) * es + 1));
  for (uint64_t e = first; e < last;) {
    const uint64_t n = std::min<uint64_t>(kChunkBytes / es, last - e);
    f.read_at(buf.data(), n * es, d.offset + e * es);
    fn(e, n, buf.data());
    e += n;
  }
}

std::string human(uint64_t bytes) {
  char buf[32];
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Every dataset of a catalog with a label: the parameters, then each optimizer state.
std::vector<std::pair<std::string, DatasetInfo>> all_datasets(const Catalog& c) {
  std::vector<std::pair<std::string, DatasetInfo>> v;
  for (const auto& d : c.model) v.emplace_back("/model/" + d.name, d);
  for (std::size_t k = 0; k < c.optimizers.size(); ++k) {
    const auto names = state_names(c.optimizers[k].kind);
    for (std::size_t b = 0; b < c.optimizers[k].states.size(); ++b)
      for (const auto& d : c.optimizers[k].states[b])
        v.emplace_back("/optimizers/" + std::to_string(k) + "/" + names[b] + "/" + d.name, d);
  }
  return v;
}

// ---- Commands --------------------------------------------------------------------------------

int info(const std::string& path) {
  const Catalog c = shared_catalog(path);
  if (g_rank != 0) return 0;
  std::printf("file:            %s (%s)\n", path.c_str(), human(c.file_size).c_str());
  std::printf("format:          %s version %lld, written by libfsdp %s on %s\n", kFormatName,
              static_cast<long long>(c.format_version), c.library_version.c_str(),
              c.created.c_str());
  std::printf("saved with:      %lld ranks, strategy %s, sharding factor %lld\n",
              static_cast<long long>(c.world_size), c.strategy.c_str(),
              static_cast<long long>(c.sharding_factor));
  std::printf("layout:          %s\n", c.layout.c_str());
  for (const auto& [k, v] : c.metadata)
    std::printf("metadata:        %s = %s\n", k.c_str(), v.c_str());
  if (c.scaler.present)
    std::printf("grad scaler:     scale %g, growth %g every %lld steps (%lld so far), backoff %g\n",
                c.scaler.scale, c.scaler.growth_factor,
                static_cast<long long>(c.scaler.growth_interval),
                static_cast<long long>(c.scaler.growth_tracker), c.scaler.backoff_factor);
  for (std::size_t k = 0; k < c.optimizers.size(); ++k) {
    const OptimizerInfo& o = c.optimizers[k];
    std::printf("optimizer %zu:     %s, %zu group(s)", k, o.kind.c_str(), o.groups.size());
    for (std::size_t b = 0; b < o.states.size(); ++b)
      std::printf(", %s for %zu parameters", state_names(o.kind)[b].c_str(), o.states[b].size());
    std::printf("\n");
    for (std::size_t g = 0; g < o.groups.size(); ++g)
      std::printf("  group %zu '%s': lr %g, weight_decay %g, momentum %g, betas (%g, %g), eps %g\n",
                  g, o.groups[g].pattern.c_str(), o.groups[g].lr, o.groups[g].weight_decay,
                  o.groups[g].momentum, o.groups[g].beta1, o.groups[g].beta2, o.groups[g].eps);
  }
  uint64_t params = 0, bytes = 0;
  std::printf("%-40s %-8s %-20s %12s\n", "parameter", "dtype", "shape", "bytes");
  for (const DatasetInfo& d : c.model) {
    std::printf("%-40s %-8s %-20s %12llu\n", d.name.c_str(), dtype_name(d.dtype),
                shape_text(d.shape).c_str(), static_cast<unsigned long long>(d.bytes()));
    params += d.numel, bytes += d.bytes();
  }
  std::printf("%zu parameters, %llu elements, %s of values (%s with optimizer state)\n",
              c.model.size(), static_cast<unsigned long long>(params), human(bytes).c_str(),
              human(c.total_bytes()).c_str());
  return 0;
}

int verify(const std::string& path, bool progress) {
  // The datasets themselves are the authority; the index must agree with them.
  const Catalog c = shared_catalog(path, ckpt::CatalogSource::Walk);
  const Catalog indexed = shared_catalog(path);
  const bool index_wrong = indexed.from_index && !same_datasets(c, indexed);
  const auto ds = all_datasets(c);
  uint64_t mine_total = 0, done = 0;
  for (const auto& d : ds) {
    const auto [a, b] = my_range(d.second.numel);
    mine_total += (b - a) * dtype_size(d.second.dtype);
  }
  progress = progress || (isatty(2) && c.total_bytes() > (uint64_t{64} << 20));
  std::vector<PartialCrc> partial;
  agree_on(MPI_COMM_WORLD, [&] {
    PosixFile f(path, O_RDONLY);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const DatasetInfo& d = ds[i].second;
      const auto [a, b] = my_range(d.numel);
      uint32_t crc = 0;
      for_chunks(f, d, a, b, [&](uint64_t, uint64_t n, const char* p) {
        const uint64_t nb = n * dtype_size(d.dtype);
        crc = crc32c_combine(crc, crc32c(0, p, nb), nb);
        done += nb;
        if (progress && g_rank == 0) {
          const int pct = mine_total ? static_cast<int>(100 * done / mine_total) : 100;
          std::fprintf(stderr, "\rverify: [%-40s] %3d%% %s",
                       std::string(pct * 40 / 100, '#').c_str(), pct,
                       human(done * static_cast<uint64_t>(g_size)).c_str());
        }
      });
      partial.push_back({i, a, b - a, crc});
    }
  });
  if (progress && g_rank == 0) std::fprintf(stderr, "\n");
  const auto bad = failed_checksums(MPI_COMM_WORLD, ds, partial);
  const int failed = static_cast<int>(bad.size());
  if (g_rank == 0) {
    for (const auto& b : bad) std::printf("checksum mismatch: %s\n", b.c_str());
    if (index_wrong)
      std::printf("index: /index disagrees with the datasets it lists (loads would trust it)\n");
    else if (!indexed.from_index)
      std::printf(
          "index: absent or out of date; loads read every dataset's attributes instead "
          "(slower with thousands of parameters; a new save writes a fresh one)\n");
    if (failed)
      std::printf("FAILED: %d of %zu datasets are corrupt\n", failed, ds.size());
    else if (index_wrong)
      std::printf("FAILED: the index is wrong\n");
    else
      std::printf("OK: %zu datasets, %s verified\n", ds.size(), human(c.total_bytes()).c_str());
  }
  return failed || index_wrong ? 1 : 0;
}

// What differs between two checkpoints besides dataset values: metadata, optimizers (kind,
// groups and hyperparameters) and the gradient scaler, one line each.
std::vector<std::string> state_differences(const Catalog& a, const Catalog& b) {
  std::vector<std::string> out;
  const auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  std::map<std::string, std::string> ma(a.metadata.begin(), a.metadata.end()),
      mb(b.metadata.begin(), b.metadata.end());
  for (const auto& [k, v] : ma) {
    const auto it = mb.find(k);
    if (it == mb.end())
      out.push_back("metadata '" + k + "' only in A");
    else if (it->second != v)
      out.push_back("metadata '" + k + "': '" + v + "' vs '" + it->second + "'");
  }
  for (const auto& [k, v] : mb)
    if (!ma.count(k)) out.push_back("metadata '" + k + "' only in B");
  if (a.optimizers.size() != b.optimizers.size())
    out.push_back("optimizers: " + std::to_string(a.optimizers.size()) + " vs " +
                  std::to_string(b.optimizers.size()));
  for (std::size_t k = 0; k < std::min(a.optimizers.size(), b.optimizers.size()); ++k) {
    const OptimizerInfo &oa = a.optimizers[k], &ob = b.optimizers[k];
    const std::string who = "optimizer " + std::to_string(k);
    if (oa.kind != ob.kind) out.push_back(who + ": " + oa.kind + " vs " + ob.kind);
    if (oa.groups.size() != ob.groups.size())
      out.push_back(who + ": " + std::to_string(oa.groups.size()) + " vs " +
                    std::to_string(ob.groups.size()) + " groups");
    for (std::size_t g = 0; g < std::min(oa.groups.size(), ob.groups.size()); ++g) {
      const OptimizerGroupInfo &ga = oa.groups[g], &gb = ob.groups[g];
      const std::string at = who + " group " + std::to_string(g) + " ";
      if (ga.pattern != gb.pattern)
        out.push_back(at + "pattern: '" + ga.pattern + "' vs '" + gb.pattern + "'");
      const std::pair<const char*, std::pair<double, double>> hp[] = {
          {"lr", {ga.lr, gb.lr}},
          {"weight_decay", {ga.weight_decay, gb.weight_decay}},
          {"momentum", {ga.momentum, gb.momentum}},
          {"dampening", {ga.dampening, gb.dampening}},
          {"nesterov", {double(ga.nesterov), double(gb.nesterov)}},
          {"beta1", {ga.beta1, gb.beta1}},
          {"beta2", {ga.beta2, gb.beta2}},
          {"eps", {ga.eps, gb.eps}}};
      for (const auto& [name, v] : hp)
        if (v.first != v.second)
          out.push_back(at + name + ": " + text(v.first) + " vs " + text(v.second));
    }
  }
  const ScalerInfo &sa = a.scaler, &sb = b.scaler;
  if (sa.present != sb.present)
    out.push_back(std::string("grad scaler: only in ") + (sa.present ? "A" : "B"));
  else if (sa.present &&
           (sa.scale != sb.scale || sa.growth_factor != sb.growth_factor ||
            sa.backoff_factor != sb.backoff_factor || sa.growth_interval != sb.growth_interval ||
            sa.growth_tracker != sb.growth_tracker))
    out.push_back("grad scaler: scale " + text(sa.scale) + " vs " + text(sb.scale) +
                  ", growth tracker " + std::to_string(sa.growth_tracker) + " vs " +
                  std::to_string(sb.growth_tracker));
  return out;
}

int diff(const std::string& pa, const std::string& pb, bool model_only) {
  Catalog a = shared_catalog(pa), b = shared_catalog(pb);
  if (model_only) {  // parameters alone: what an export or import carries
    for (Catalog* c : {&a, &b}) {
      c->optimizers.clear();
      c->scaler = ScalerInfo{};
      c->metadata.clear();
    }
  }
  // Every dataset by its label: parameters (/model/NAME) and optimizer state
  // (/optimizers/K/STATE/NAME).
  const auto da_all = all_datasets(a), db_all = all_datasets(b);
  std::map<std::string, const DatasetInfo*> in_b;
  for (const auto& [label, d] : db_all) in_b[label] = &d;
  std::vector<std::string> only_a, only_b, shape;
  struct Pair {
    std::string label;
    const DatasetInfo *a, *b;
  };
  std::vector<Pair> common;
  std::set<std::string> in_a;
  for (const auto& [label, d] : da_all) {
    in_a.insert(label);
    const auto it = in_b.find(label);
    if (it == in_b.end())
      only_a.push_back(label);
    else if (it->second->shape != d.shape)
      shape.push_back(label + ": " + shape_text(d.shape) + " vs " + shape_text(it->second->shape));
    else
      common.push_back({label, &d, it->second});
  }
  for (const auto& [label, d] : db_all)
    if (!in_a.count(label)) only_b.push_back(label);
  std::vector<double> stats(2 * common.size(), 0.0);  // max abs, max rel per dataset
  agree_on(MPI_COMM_WORLD, [&] {
    PosixFile fa(pa, O_RDONLY), fb(pb, O_RDONLY);
    std::vector<double> x, y;
    std::vector<char> other;
    for (std::size_t i = 0; i < common.size(); ++i) {
      const DatasetInfo &da = *common[i].a, &db = *common[i].b;
      const auto [lo, hi] = my_range(da.numel);
      for_chunks(fa, da, lo, hi, [&](uint64_t first, uint64_t n, const char* p) {
        x.resize(n), y.resize(n);
        fsdp_convert(x.data(), FSDP_FLOAT64, p, static_cast<fsdp_dtype_t>(da.dtype), n);
        other.resize(n * dtype_size(db.dtype));
        fb.read_at(other.data(), other.size(), db.offset + first * dtype_size(db.dtype));
        fsdp_convert(y.data(), FSDP_FLOAT64, other.data(), static_cast<fsdp_dtype_t>(db.dtype), n);
        for (uint64_t e = 0; e < n; ++e) {
          const double d = std::fabs(x[e] - y[e]);
          const double scale = std::max(std::fabs(x[e]), std::fabs(y[e]));
          const bool nan = std::isnan(x[e]) != std::isnan(y[e]);
          const double abs_d = nan ? INFINITY : std::isnan(d) ? 0.0 : d;
          stats[2 * i] = std::max(stats[2 * i], abs_d);
          if (scale > 0) stats[2 * i + 1] = std::max(stats[2 * i + 1], abs_d / scale);
        }
      });
    }
  });
  std::vector<double> global(stats.size());
  MPI_Reduce(stats.data(), global.data(), static_cast<int>(stats.size()), MPI_DOUBLE, MPI_MAX, 0,
             MPI_COMM_WORLD);
  const std::vector<std::string> state = state_differences(a, b);
  int differ = !only_a.empty() || !only_b.empty() || !shape.empty() || !state.empty();
  if (g_rank == 0) {
    std::printf("%-48s %14s %14s\n", "dataset", "max abs diff", "max rel diff");
    int values = 0;
    for (std::size_t i = 0; i < common.size(); ++i) {
      std::printf("%-48s %14.6g %14.6g\n", common[i].label.c_str(), global[2 * i],
                  global[2 * i + 1]);
      values += global[2 * i] != 0;
    }
    differ |= values != 0;
    for (const auto& n : only_a) std::printf("only in %s: %s\n", pa.c_str(), n.c_str());
    for (const auto& n : only_b) std::printf("only in %s: %s\n", pb.c_str(), n.c_str());
    for (const auto& n : shape) std::printf("shapes differ: %s\n", n.c_str());
    for (const auto& n : state) std::printf("differs (A vs B): %s\n", n.c_str());
    // What was compared, so that a verdict never claims more than that.
    if (model_only && differ)
      std::printf(
          "checkpoints differ in their parameters (--model-only: nothing else compared): %d "
          "dataset(s) by value, %zu only in one, %zu by shape\n",
          values, only_a.size() + only_b.size(), shape.size());
    else if (differ)
      std::printf(
          "checkpoints differ: %d dataset(s) by value, %zu only in one, %zu by shape, %zu "
          "in metadata, hyperparameters or scaler\n",
          values, only_a.size() + only_b.size(), shape.size(), state.size());
    else if (model_only)
      std::printf(
          "checkpoints have identical parameters (--model-only: optimizer state, "
          "hyperparameters, scaler and metadata not compared)\n");
    else
      std::printf(
          "checkpoints are identical (parameters, optimizer state, hyperparameters, "
          "scaler and metadata)\n");
  }
  MPI_Bcast(&differ, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return differ ? 1 : 0;
}

// --dtype names: bf16, fp16, fp32, fp64.
fsdp_dtype_t dtype_flag(const std::string& s) {
  if (s.empty()) return FSDP_DTYPE_AUTO;
  if (s == "bf16") return FSDP_BFLOAT16;
  if (s == "fp16") return FSDP_FLOAT16;
  if (s == "fp32") return FSDP_FLOAT32;
  if (s == "fp64") return FSDP_FLOAT64;
  fail(Errc::InvalidArgument, "--dtype " + s + ": expected bf16, fp16, fp32 or fp64");
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
    fail(Errc::InvalidArgument,
         "--max-shard-size " + s + ": expected a positive size such as 5GB, 500MB or 2GiB");
  return static_cast<uint64_t>(v * u->second);
}

// The C calls; errors come back as fsdp_last_error()'s text.
void check_call(fsdp_status_t st) {
  if (st != FSDP_SUCCESS) fail(static_cast<Errc>(st), fsdp_last_error());
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
      fail(Errc::InvalidArgument, "unknown option '" + s + "'\n" + kUsage);
    else
      a.positional.push_back(s);
  }
  return a;
}

int run(int argc, char** argv) {
  if (argc < 2) fail(Errc::InvalidArgument, std::string("no command\n") + kUsage);
  const std::string cmd = argv[1];
  const bool tool_help = cmd == "-h" || cmd == "--help" || cmd == "help";
  if (!tool_help && !std::set<std::string>{"info", "verify", "diff", "export", "import"}.count(cmd))
    fail(Errc::InvalidArgument, "unknown command '" + cmd + "'\n" + kUsage);
  const Args a = tool_help ? Args{} : parse(argc, argv);
  if (tool_help || a.help) {  // of the tool or of a command: to stdout, and a success
    if (g_rank == 0) std::printf("%s", kUsage);
    return 0;
  }
  auto need = [&](std::size_t n, bool to) {
    if (a.positional.size() != n || (to && a.to.empty()))
      fail(Errc::InvalidArgument, "wrong arguments for '" + cmd + "'\n" + kUsage);
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
    // Argument errors are the same on every rank; file errors are unified by the commands.
    status = run(argc, argv);
  } catch (const Error& e) {
    if (g_rank == 0) std::fprintf(stderr, "fsdp-ckpt: error: %s\n", e.what());  // unified
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp-ckpt: error: %s\n", e.what());
    status = 2;
  }
  MPI_Finalize();
  return status;
}
