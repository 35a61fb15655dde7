#include "checkpoint/checkpoint_service.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "base/agreement.hpp"
#include "base/crc32c.hpp"
#include "base/fingerprint.hpp"
#include "base/mpi_check.hpp"
#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/from_rank0.hpp"
#include "checkpoint/json_text.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/partial_checksums.hpp"
#include "checkpoint/posix_file.hpp"
#include "checkpoint/schema.hpp"
#include "checkpoint/writer.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "fsdp.h"
#include "memory/host/host_kernels.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"

namespace fsdp::ckpt {
namespace {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::FullShard: return "full_shard";
    case Strategy::HybridShard: return "hybrid_shard";
    case Strategy::NoShard: return "no_shard";
  }
  return "unknown";
}

// The unit layout at save time, as JSON text (the /layout dataset).
std::string layout_json(const std::vector<Unit*>& units) {
  std::string j = "{\"units\": [";
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Unit& unit = *units[u];
    j += u ? ", " : "";
    j += "{\"name\": " + json_quote(unit.name()) + ", \"dtype\": \"" +
         dtype_name(unit.precision().storage) + "\", \"params\": [";
    for (std::size_t i = 0; i < unit.layout().num_params(); ++i)
      j += (i ? ", " : "") + json_quote(unit.layout().param(i).name);
    j += "], \"ties\": [";
    for (std::size_t t = 0; t < unit.ties().size(); ++t) {
      const Unit* owner = unit.context().find_unit(unit.ties()[t].owner_id);
      j += (t ? ", " : "") + std::string("{\"alias\": ") + json_quote(unit.ties()[t].alias) +
           ", \"param\": " +
           json_quote(owner ? owner->layout().param(unit.ties()[t].owner_index).name : "") + "}";
    }
    j += "]}";
  }
  return j + "]}";
}

// What save and load requests share: the state they carry.
void add_state(Fingerprint& f, const std::string& path, const std::vector<Optimizer*>& optimizers,
               const GradScaler* scaler) {
  f.add(path);
  f.add(static_cast<uint64_t>(optimizers.size()));
  for (const Optimizer* o : optimizers) f.add(o ? o->id() : ~0ull);
  f.add(scaler ? scaler->id() : ~0ull);
}

uint64_t fingerprint(const SaveRequest& r) {
  Fingerprint f;
  add_state(f, r.path, r.optimizers, r.scaler);
  f.add(static_cast<uint64_t>(r.metadata.size()));
  for (const auto& kv : r.metadata) f.add(kv.first), f.add(kv.second);
  return f.value();
}

uint64_t fingerprint(const LoadRequest& r) {
  Fingerprint f;
  add_state(f, r.path, r.optimizers, r.scaler);
  f.add(static_cast<uint64_t>(r.partial) | static_cast<uint64_t>(r.model_only) << 1 |
        static_cast<uint64_t>(r.convert) << 2);
  return f.value();
}

// Checks that hold on every rank alike (the model is the same everywhere).
void check_saveable(Context& ctx, const std::vector<Optimizer*>& optimizers) {
  std::map<std::string, const Unit*> names;
  for (const Unit* u : ctx.units())
    for (const ParamSpec& p : u->layout().params()) {
      auto [it, fresh] = names.emplace(p.name, u);
      if (!fresh)
        fail(Errc::InvalidArgument, "parameter name '" + p.name + "' is used by " +
                                        it->second->label() + " and " + u->label() +
                                        ": a checkpoint addresses parameters by name, so names "
                                        "must be unique across the context's units");
    }
  std::set<const Unit*> optimized;
  for (const Optimizer* o : optimizers)
    for (const Unit* u : o->units())
      if (!optimized.insert(u).second)
        fail(Errc::InvalidArgument, u->label() +
                                        " is in more than one of the optimizers given: "
                                        "its state would be saved twice");
}

}  // namespace

// What a save writes, and this rank's share of it.
struct SaveJob {
  WritePlan plan;
  std::vector<WritePiece> pieces;
  std::deque<std::vector<char>> copies;  // background saves: the values at the call (a deque:
                                         // growing it keeps earlier buffers in place)
  std::string path;
};

namespace {

// A copy of `bytes` bytes at `data`, owned by the job. It reuses a spare buffer (one of the
// previous background save) when one is large enough: its pages are already mapped, so the copy
// runs at memory speed instead of paying a page fault every 4 KiB.
// `memory` copies (device shards reach the host through it).
const char* copy_into_job(SaveJob& job, MemorySpace& memory, const void* data, std::size_t bytes,
                          std::vector<std::vector<char>>& spares) {
  std::vector<char> buf;
  auto best = spares.end();
  for (auto it = spares.begin(); it != spares.end(); ++it)
    if (it->capacity() >= bytes && (best == spares.end() || it->capacity() < best->capacity()))
      best = it;
  if (best != spares.end()) buf = std::move(*best), spares.erase(best);
  buf.resize(bytes);
  memory.copy(buf.data(), data, bytes);
  job.copies.push_back(std::move(buf));
  return job.copies.back().data();
}

DatasetSpec param_dataset(const std::string& path, const ParamSpec& p) {
  DatasetSpec d;
  d.path = path;
  d.dtype = p.dtype;
  d.shape = p.shape;
  d.numel = p.numel;
  return d;
}

// Adds one dataset per parameter of `u` from the buffer `base` (the master copy:
// Unit::master_slice), with this rank's pieces when it writes (a master piece always: no other rank
// holds it); `optimizer` non-null: optimizer state (trainable parameters only, from the update
// range), each dataset with its parameter's update count; `spares` non-null: the pieces point into
// a copy of the buffer (a background save).
void add_unit_datasets(SaveJob& job, Unit& u, const std::string& group, const void* base,
                       const Optimizer* optimizer, bool writer,
                       std::vector<std::vector<char>>* spares) {
  const bool trainable_only = optimizer != nullptr;
  const bool master_pieces = !trainable_only && u.split_masters();
  const std::size_t es = u.layout().element_size();
  const char* src = static_cast<const char*>(base);
  if ((writer || master_pieces) && spares)
    src = copy_into_job(job, u.context().memory(), base,
                        trainable_only ? u.grad_shard_bytes() : u.bytes().masters(), *spares);
  for (std::size_t i = 0; i < u.layout().num_params(); ++i) {
    const ParamSpec& p = u.layout().param(i);
    if (trainable_only && !p.requires_grad) continue;
    DatasetSpec d = param_dataset(group + "/" + escape_name(p.name), p);
    if (optimizer) d.attrs = {Attr::i64(kStepAttr, optimizer->steps(u, i))};
    job.plan.datasets.push_back(std::move(d));
    const ShardSlice s = optimizer ? u.update_slice(i) : u.master_slice(i);
    if (!(writer || (master_pieces && u.master_in_piece(i))) || s.length == 0) continue;
    WritePiece piece;
    piece.dataset = job.plan.datasets.size() - 1;
    piece.first = s.param_offset;
    piece.count = s.length;
    piece.data = src + s.shard_offset * es;
    job.pieces.push_back(piece);
  }
}

// What the file says besides the datasets: the root, each optimizer's kind and hyperparameter
// groups, the scaler and the metadata (catalog_attrs.hpp makes them attributes).
Catalog describe_save(Context& ctx, const SaveRequest& r, const std::string& created) {
  Catalog c;
  static_cast<RootInfo&>(c) = this_library_root(ctx.groups().world().size, ctx.sharding_factor(),
                                                strategy_name(ctx.options().strategy), created,
                                                static_cast<int64_t>(ctx.units().size()));
  for (const Optimizer* o : r.optimizers) {
    OptimizerInfo& info = c.optimizers.emplace_back();
    info.kind = kind_name(o->kind());
    for (int g = 0; g < o->num_groups(); ++g) {
      OptimizerGroupInfo& group = info.groups.emplace_back();
      static_cast<HyperParams&>(group) = o->group(g);
      group.pattern = o->pattern(g);
    }
  }
  if (r.scaler)
    c.scaler = {true,
                r.scaler->scale(),
                r.scaler->growth_factor(),
                r.scaler->backoff_factor(),
                r.scaler->growth_interval(),
                r.scaler->growth_tracker()};
  c.metadata = r.metadata;
  return c;
}

// `spares` null: the pieces point at the live shards (a synchronous save). `writer`: this rank
// writes its parameter pieces (one replica does); with HFSDP every rank writes the optimizer
// state it holds, and its master piece where the masters are split.
SaveJob build_save(Context& ctx, const SaveRequest& r, bool writer,
                   std::vector<std::vector<char>>* spares, const std::string& created) {
  SaveJob job;
  job.path = r.path;
  const std::vector<Unit*> units = ctx.units();
  job.plan.groups = attribute_groups(describe_save(ctx, r, created));
  const bool state_writer = writer || ctx.options().hfsdp;
  DatasetSpec layout;
  layout.path = kLayoutDataset;
  layout.text = layout_json(units);
  job.plan.datasets.push_back(layout);
  for (Unit* u : units)
    add_unit_datasets(job, *u, kModelGroup, u->shard_data(), nullptr, writer, spares);
  for (std::size_t k = 0; k < r.optimizers.size(); ++k) {
    const Optimizer& o = *r.optimizers[k];
    const std::vector<std::string> names = state_names(kind_name(o.kind()));
    for (std::size_t b = 0; b < names.size(); ++b)
      for (Unit* u : o.units()) {
        const void* state = o.state(*u, static_cast<int>(b));
        if (!state) continue;  // no update yet: no state
        add_unit_datasets(job, *u, state_path(k, names[b]), state, &o, state_writer, spares);
      }
  }
  return job;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
CheckpointService& CheckpointService::of(Context& ctx) {
  if (ContextPart* p = ctx.part(PartSlot::Checkpoints)) return static_cast<CheckpointService&>(*p);
  auto s = std::make_unique<CheckpointService>(ctx);
  CheckpointService& ref = *s;
  ctx.set_part(PartSlot::Checkpoints, std::move(s));
  return ref;
}

CheckpointService::~CheckpointService() {
  wait_pending();
  worker_.reset();
  for (MPI_Comm* c : {&all_, &writers_, &shard_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void CheckpointService::wait_pending() {
  if (!pending_) return;
  try {
    pending_->wait();
  } catch (...) {  // the error belongs to the save's request
  }
  pending_.reset();
}

void CheckpointService::ensure_comms() {
  if (all_ != MPI_COMM_NULL) return;
  const ProcessGroups& g = ctx_.groups();
  mpi_check(MPI_Comm_dup(g.world().comm, &all_), "MPI_Comm_dup");
  // One replica (replicate rank 0) writes, its members in shard order; with HFSDP every rank
  // writes the optimizer state it holds, so all do (in world order).
  const bool hfsdp = ctx_.options().hfsdp;
  mpi_check(MPI_Comm_split(all_, hfsdp || g.replicate().rank == 0 ? 0 : MPI_UNDEFINED,
                           hfsdp ? g.world().rank : g.shard().rank, &writers_),
            "MPI_Comm_split");
  mpi_check(MPI_Comm_dup(g.shard().comm, &shard_), "MPI_Comm_dup");
  for (MPI_Comm c : {all_, writers_, shard_})
    if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  worker_ = std::make_unique<CommWorker>(ctx_.worker().threaded());
}

std::shared_ptr<CommWorker::Task> CheckpointService::start_save(
    const SaveRequest& r, const std::optional<Error>& local_error, bool background) {
  wait_pending();
  ctx_.scheduler().quiesce();
  ctx_.before_shard_update();  // the shards as the caller's queued work leaves them
  const Group& world = ctx_.groups().world();
  agree(world, "checkpoint save arguments", fingerprint(r), local_error);
  check_saveable(ctx_, r.optimizers);
  ensure_comms();
  const std::string created = broadcast_string(world.comm, utc_timestamp());
  const bool writer = ctx_.groups().replicate().rank == 0;  // writes the parameters
  std::shared_ptr<SaveJob> job;
  if (background) {
    std::vector<std::vector<char>> spares;  // the last background save's copies (it finished)
    if (last_job_)
      for (auto& c : last_job_->copies) spares.push_back(std::move(c));
    job = std::make_shared<SaveJob>(build_save(ctx_, r, writer, &spares, created));
    last_job_ = job;  // spares it did not reuse (the layout changed) are freed here
  } else if (!ctx_.shard_memory().host_accessible()) {
    std::vector<std::vector<char>> none;  // device shards: written from host copies
    job = std::make_shared<SaveJob>(build_save(ctx_, r, writer, &none, created));
  } else {
    job = std::make_shared<SaveJob>(build_save(ctx_, r, writer, nullptr, created));
  }
  ctx_.memory().synchronize();  // the copies above are complete before anything reads them
  const WriteComms comms{all_, writers_};
  auto task =
      worker_->submit([job, comms] { write_checkpoint(comms, job->path, job->plan, job->pieces); });
  if (background) pending_ = task;
  return task;
}

void CheckpointService::save(const SaveRequest& r, const std::optional<Error>& local_error) {
  start_save(r, local_error, false)->wait();
}

std::shared_ptr<CommWorker::Task> CheckpointService::save_async(
    const SaveRequest& r, const std::optional<Error>& local_error) {
  return start_save(r, local_error, true);
}

// ---------------------------------------------------------------------------------------------
// Loading, in phases: read the catalog (rank 0, broadcast), match it with the model and the
// optimizers, plan this rank's reads, verify every checksum, read, then apply what is not data
// (step counts, hyperparameters, the scaler). Nothing changes before every rank has verified.
namespace {

// One dataset to read: where it goes (a unit's parameter, or its optimizer state), and this
// rank's range of it.
struct Target {
  const DatasetInfo* file = nullptr;
  Unit* unit = nullptr;
  std::size_t param = 0;
  int optimizer = -1, buffer = -1;  // -1: the parameter itself
  // Under HFSDP: whether this rank's range of it is one of the whole job's (optimizer state, and
  // split masters' pieces) rather than one of its shard group's.
  bool in_piece() const { return optimizer < 0 ? unit->master_in_piece(param) : true; }
};

// One of the request's optimizers against the file's optimizer at its position.
struct OptimizerMatch {
  Optimizer* optimizer = nullptr;
  const OptimizerInfo* file = nullptr;
  bool same_kind = false;
  // The same hyperparameter groups (count and patterns): the file's hyperparameters apply.
  bool same_groups = false;
};

// What a unit's optimizer state becomes.
struct UnitSteps {
  // Per parameter, the update count its state was saved at (-1: no state in the file; -2: not
  // in the file, or frozen). Every parameter in the file has state, or none.
  std::vector<int64_t> steps;
  // Optional buffers (schema.hpp StateRow) the file holds for none of the unit's parameters.
  std::vector<int> absent_buffers;
};

// The catalog against the model and optimizers. A pure function of both, so every rank reaches
// the same verdict.
struct Match {
  std::vector<Target> targets;
  LoadReport report;
  std::vector<std::string> problems;  // strict: any is fatal
  std::vector<OptimizerMatch> optimizers;
  std::map<std::pair<int, const Unit*>, UnitSteps> steps;  // by optimizer and unit
};

void note(Match& m, const std::string& line, bool fatal) {
  m.report.details += line + "\n";
  if (fatal) m.problems.push_back(line);
}

void match_model(Context& ctx, const Catalog& c, bool convert, Match& m) {
  std::set<std::string> model_names;
  for (Unit* u : ctx.units()) {
    for (std::size_t i = 0; i < u->layout().num_params(); ++i) {
      const ParamSpec& p = u->layout().param(i);
      model_names.insert(p.name);
      const DatasetInfo* d = c.find_param(p.name);
      if (!d) {
        ++m.report.missing;
        note(m, "missing: " + p.name + " (in the model, not in the file)", true);
        continue;
      }
      if (d->shape != p.shape) {
        ++m.report.mismatched;
        note(m,
             "shape: " + p.name + " is " + shape_text(p.shape) + " in the model, " +
                 shape_text(d->shape) + " in the file",
             true);
        continue;
      }
      if (d->dtype != p.dtype && !convert) {
        ++m.report.mismatched;
        note(m,
             std::string("dtype: ") + p.name + " is " + dtype_name(p.dtype) + " in the model, " +
                 dtype_name(d->dtype) + " in the file (FSDP_LOAD_CONVERT_DTYPE converts)",
             true);
        continue;
      }
      ++m.report.loaded;
      m.targets.push_back({d, u, i});
    }
  }
  for (const DatasetInfo& d : c.model)
    if (!model_names.count(d.name)) {
      ++m.report.unexpected;
      note(m, "unexpected: " + d.name + " (in the file, not in the model)", true);
    }
}

OptimizerMatch pair_optimizer(Optimizer& o, const OptimizerInfo& f) {
  OptimizerMatch om{&o, &f, f.kind == kind_name(o.kind()), false};
  om.same_groups = static_cast<int>(f.groups.size()) == o.num_groups();
  for (int g = 0; om.same_groups && g < o.num_groups(); ++g)
    om.same_groups = f.groups[static_cast<std::size_t>(g)].pattern == o.pattern(g);
  return om;
}

// The state of optimizer k's units: targets for its buffers and each unit's step counts.
void match_optimizer_state(const Catalog& c, bool convert, int k, const OptimizerMatch& om,
                           Match& m) {
  const OptimizerInfo& fo = *om.file;
  const std::string who = "optimizer " + std::to_string(k);
  for (const Unit* cu : om.optimizer->units()) {
    Unit* u = const_cast<Unit*>(cu);
    const auto file_state = [&](std::size_t b, const ParamSpec& p) {
      return p.requires_grad && c.find_param(p.name) ? find_dataset(fo.states[b], p.name) : nullptr;
    };
    UnitSteps us{std::vector<int64_t>(u->layout().num_params(), -2), {}};
    std::vector<std::size_t> buffers;
    for (std::size_t b = 0; b < fo.states.size(); ++b) {
      bool held = false;
      for (std::size_t i = 0; i < u->layout().num_params() && !held; ++i)
        held = file_state(b, u->layout().param(i)) != nullptr;
      if (!held && state_optional(fo.kind, b))
        us.absent_buffers.push_back(static_cast<int>(b));
      else
        buffers.push_back(b);
    }
    bool consistent = true, with_state = false, without_state = false;
    for (std::size_t i = 0; i < u->layout().num_params(); ++i) {
      const ParamSpec& p = u->layout().param(i);
      if (!p.requires_grad || !c.find_param(p.name)) continue;
      for (std::size_t n = 0; n < buffers.size(); ++n) {
        const DatasetInfo* d = file_state(buffers[n], p);
        const int64_t s = d ? d->step : -1;
        if (n == 0) us.steps[i] = s;
        if (s != us.steps[i]) consistent = false;  // one parameter's buffers at two counts
        (s < 0 ? without_state : with_state) = true;
        if (d && d->shape == p.shape && (d->dtype == p.dtype || convert))
          m.targets.push_back({d, u, i, k, static_cast<int>(buffers[n])});
      }
    }
    if (!consistent || (with_state && without_state)) {
      note(m,
           who + ": " + u->label() +
               " mixes parameters saved with and without state (or one parameter's buffers "
               "at different step counts): they cannot share one unit's state",
           true);
      continue;
    }
    m.steps[{k, u}] = std::move(us);
  }
}

Match match(Context& ctx, const Catalog& c, const LoadRequest& r) {
  Match m;
  match_model(ctx, c, r.convert, m);
  if (r.model_only) return m;
  if (r.optimizers.size() > c.optimizers.size())
    note(m,
         "optimizers: " + std::to_string(r.optimizers.size()) + " given, the file has " +
             std::to_string(c.optimizers.size()),
         true);
  for (std::size_t k = 0; k < r.optimizers.size() && k < c.optimizers.size(); ++k) {
    const OptimizerMatch om = pair_optimizer(*r.optimizers[k], c.optimizers[k]);
    m.optimizers.push_back(om);
    const std::string who = "optimizer " + std::to_string(k);
    if (!om.same_kind) {
      note(m,
           who + ": the file's is " + om.file->kind + ", this one " +
               kind_name(om.optimizer->kind()),
           true);
      continue;
    }
    if (!om.same_groups) note(m, who + ": hyperparameter groups differ (count or patterns)", true);
    match_optimizer_state(c, r.convert, static_cast<int>(k), om, m);
  }
  if (r.scaler && !c.scaler.present) note(m, "grad_scaler: the file has none", true);
  return m;
}

std::string problem_list(const std::vector<std::string>& p) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(p.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) s += "\n  " + p[i];
  if (p.size() > shown) s += "\n  ... and " + std::to_string(p.size() - shown) + " more";
  return s;
}

// One range of a dataset that this rank reads: its target, its place in the shard and in the file.
struct FileRange {
  std::size_t target;
  ShardSlice slice;
  uint64_t file_offset, bytes;
};

// This rank's ranges, in file order.
std::vector<FileRange> plan_reads(const std::vector<Target>& targets) {
  std::vector<FileRange> ranges;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const Target& tg = targets[t];
    const ShardSlice s =
        tg.optimizer < 0 ? tg.unit->master_slice(tg.param) : tg.unit->update_slice(tg.param);
    if (s.length == 0) continue;
    const std::size_t fes = dtype_size(tg.file->dtype);
    ranges.push_back({t, s, tg.file->offset + s.param_offset * fes, s.length * fes});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const FileRange& a, const FileRange& b) { return a.file_offset < b.file_offset; });
  return ranges;
}

// Each range's CRC-32C, in file order, read in 1 MiB pieces into one buffer that stays in the
// CPU's cache while it is checksummed; the kernel's read-ahead keeps the disk busy meanwhile.
std::vector<PartialCrc> checksum(const PosixFile& file, const std::vector<FileRange>& ranges,
                                 const std::vector<Target>& targets) {
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  std::vector<char> piece(kPiece);
  std::vector<PartialCrc> crc;
  for (const FileRange& rg : ranges) {
    uint32_t c = 0;
    for (uint64_t done = 0; done < rg.bytes; done += kPiece) {
      const uint64_t n = std::min(kPiece, rg.bytes - done);
      file.read_at(piece.data(), n, rg.file_offset + done, targets[rg.target].file->name);
      c = crc32c(c, piece.data(), n);
    }
    crc.push_back({rg.target, rg.slice.param_offset, rg.slice.length, c});
  }
  return crc;
}

// The targets `comm` holds exactly once (those `picked` says): its members' partial checksums
// combine to each dataset's.
template <class Picked>
void verify_checksums(MPI_Comm comm, const std::vector<Target>& targets,
                      const std::vector<PartialCrc>& local, Picked picked_target) {
  std::vector<std::size_t> picked(targets.size(), SIZE_MAX);
  std::vector<std::size_t> of;  // the picked targets' indices
  std::vector<DatasetExtent> extents;
  for (std::size_t t = 0; t < targets.size(); ++t)
    if (picked_target(targets[t])) {
      picked[t] = of.size();
      of.push_back(t);
      extents.push_back(
          {targets[t].file->name, targets[t].file->numel, dtype_size(targets[t].file->dtype)});
    }
  std::vector<PartialCrc> mine;
  for (PartialCrc c : local)
    if (picked[c.dataset] != SIZE_MAX) {
      c.dataset = picked[c.dataset];
      mine.push_back(c);
    }
  const std::vector<uint32_t> crc = combined_checksums(comm, mine, extents);
  for (std::size_t k = 0; k < of.size(); ++k) {
    const Target& tg = targets[of[k]];
    if (crc[k] == tg.file->crc) continue;
    const std::string what = tg.optimizer < 0 ? "parameter '" + tg.file->name + "'"
                                              : "optimizer state of '" + tg.file->name + "'";
    char buf[64];
    std::snprintf(buf, sizeof buf, " (stored crc32c %08x, computed %08x)", tg.file->crc, crc[k]);
    fail(Errc::Corrupt, what + ": checksum mismatch" + buf + ": the file is corrupt");
  }
}

// Pass 1: opens the file and checks every rank's ranges of every dataset (inside the file, the
// checksums), before anything is copied. Each shard group holds every parameter once; optimizer
// state too, or with HFSDP the whole job does (and the master pieces, Target::in_piece).
std::unique_ptr<PosixFile> open_verified(MPI_Comm all, MPI_Comm shard, bool hfsdp,
                                         const std::string& path,
                                         const std::vector<FileRange>& ranges,
                                         const std::vector<Target>& targets) {
  std::unique_ptr<PosixFile> file;
  agree_on(all, [&] {
    file = std::make_unique<PosixFile>(path, O_RDONLY);
    file->advise_sequential();
    for (const FileRange& rg : ranges)
      if (rg.file_offset + rg.bytes > file->size())
        fail(Errc::Corrupt, "'" + path + "': " + targets[rg.target].file->name +
                                " runs past the end of the file (truncated file)");
  });
  agree_on(all, [&] {
    const std::vector<PartialCrc> crc = checksum(*file, ranges, targets);
    if (!hfsdp) return verify_checksums(shard, targets, crc, [](const Target&) { return true; });
    verify_checksums(shard, targets, crc, [](const Target& t) { return !t.in_piece(); });
    verify_checksums(all, targets, crc, [](const Target& t) { return t.in_piece(); });
  });
  return file;
}

// Pass 2: copies (or converts) the verified ranges over the shards and optimizer state. State
// buffers are allocated (zeros) even where this rank holds none of a unit's parameters, so every
// rank's optimizer agrees on what exists. Device shards are filled through one host copy of each
// buffer (a unit's master copy, an optimizer state buffer: shared by the unit's parameters; what
// the file does not cover keeps its value), copied back once every range is in.
void read_ranges(Context& ctx, MPI_Comm all, const LoadRequest& r,
                 const std::vector<Target>& targets, const std::vector<FileRange>& ranges,
                 const PosixFile& file) {
  MemorySpace& memory = ctx.memory();
  const bool staged = !ctx.shard_memory().host_accessible();
  std::vector<char*> destination(targets.size());
  struct Staging {
    char* device;
    std::vector<char> host;
  };
  std::vector<Staging> staging;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const Target& tg = targets[t];
    char* d = static_cast<char*>(
        tg.optimizer < 0 ? tg.unit->shard_data()
                         : r.optimizers[static_cast<std::size_t>(tg.optimizer)]->ensure_state(
                               *tg.unit, tg.buffer));
    destination[t] = d;
    if (!staged) continue;
    auto same = std::find_if(staging.begin(), staging.end(),
                             [&](const Staging& b) { return b.device == d; });
    if (same == staging.end()) {
      Staging& b = staging.emplace_back(Staging{d, {}});
      b.host.resize(tg.optimizer < 0 ? tg.unit->bytes().masters() : tg.unit->grad_shard_bytes());
      memory.copy(b.host.data(), d, b.host.size());
      same = staging.end() - 1;
    }
    destination[t] = same->host.data();
  }
  if (staged) memory.synchronize();
  // The kernel copies each range from the page cache straight into its destination, or into an
  // aligned buffer when it must be converted. The file was just read whole: an error here means it
  // changed under the load; every rank reports it alike.
  agree_on(all, [&] {
    std::vector<double> aligned;
    for (const FileRange& rg : ranges) {
      const Target& tg = targets[rg.target];
      const DType model_t = tg.unit->layout().param(tg.param).dtype;
      char* dst = destination[rg.target] + rg.slice.shard_offset * tg.unit->layout().element_size();
      if (tg.file->dtype == model_t) {
        file.read_at(dst, rg.bytes, rg.file_offset, tg.file->name);
        continue;
      }
      aligned.resize((rg.bytes + sizeof(double) - 1) / sizeof(double));
      file.read_at(aligned.data(), rg.bytes, rg.file_offset, tg.file->name);
      host::convert(dst, model_t, aligned.data(), tg.file->dtype, rg.slice.length);
    }
  });
  if (staged) {
    for (const Staging& b : staging) memory.copy(b.device, b.host.data(), b.host.size());
    memory.synchronize();  // before `staging` goes
  }
}

// What is not data: each optimizer's hyperparameters (when its groups match the file's) and
// step counts, and the scaler.
void apply_state(Context& ctx, const Match& m, const Catalog& c, GradScaler* scaler) {
  for (std::size_t k = 0; k < m.optimizers.size(); ++k) {
    const OptimizerMatch& om = m.optimizers[k];
    Optimizer& o = *om.optimizer;
    if (!om.same_kind) continue;
    for (int g = 0; om.same_groups && g < o.num_groups(); ++g)
      o.set_hyperparams(g, om.file->groups[static_cast<std::size_t>(g)]);
    for (const Unit* u : o.units()) {
      auto it = m.steps.find({static_cast<int>(k), u});
      if (it == m.steps.end()) continue;
      const UnitSteps& us = it->second;
      const auto zero = [&](int b) {
        if (void* p = o.state(*u, b)) ctx.shard_memory().zero(p, u->grad_shard_bytes());
      };
      for (int b : us.absent_buffers) zero(b);
      if (std::find(us.steps.begin(), us.steps.end(), -1) != us.steps.end()) {
        // saved before any update: no state
        for (int b = 0; b < Optimizer::max_state_buffers(o.kind()); ++b) zero(b);
        o.set_steps(*u, 0);
      } else {
        for (std::size_t i = 0; i < us.steps.size(); ++i)
          if (us.steps[i] >= 0) o.set_steps(*u, i, us.steps[i]);
      }
    }
  }
  if (scaler && c.scaler.present)
    scaler->restore(c.scaler.scale, static_cast<int>(c.scaler.growth_tracker));
}

}  // namespace

void CheckpointService::prepare_load(const LoadRequest& r,
                                     const std::optional<Error>& local_error) {
  wait_pending();
  ctx_.scheduler().quiesce();
  ctx_.before_shard_update();  // nothing queued still reads or writes the shards
  agree(ctx_.groups().world(), "checkpoint load arguments", fingerprint(r), local_error);
  ensure_comms();
  for (const Unit* u : ctx_.units())
    if (u->is_unsharded())
      fail(Errc::State, u->label() +
                            " is unsharded: reshard every unit before loading (its "
                            "unsharded copy would keep the old values)");
}

LoadReport CheckpointService::load(const LoadRequest& r, const std::optional<Error>& local_error) {
  prepare_load(r, local_error);
  // Read once, by rank 0: every rank sees the same file and the same error.
  const Catalog catalog = shared_catalog(all_, r.path);
  const Match m = match(ctx_, catalog, r);
  if (!m.problems.empty() && !r.partial)
    fail(Errc::Mismatch, "'" + r.path + "' does not match the model (nothing was loaded):" +
                             problem_list(m.problems));
  const std::vector<FileRange> ranges = plan_reads(m.targets);
  const std::unique_ptr<PosixFile> file =
      open_verified(all_, shard_, ctx_.options().hfsdp, r.path, ranges, m.targets);
  // Everything is verified: from here on the destinations change.
  read_ranges(ctx_, all_, r, m.targets, ranges, *file);
  for (Unit* u : ctx_.units())  // split masters: the trainable blocks from the loaded pieces
    if (u->split_masters()) u->gather_update_pieces();
  apply_state(ctx_, m, catalog, r.model_only ? nullptr : r.scaler);
  ctx_.shard_memory().handover_to_caller();  // the caller's stream sees the loaded values
  return m.report;
}

}  // namespace fsdp::ckpt
