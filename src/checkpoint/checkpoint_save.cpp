// Saving (CheckpointService::save, save_async): what a model, its optimizers and grad scaler
// become in the file, and this rank's pieces of it, handed to writer.hpp on the service's thread.
#include <deque>
#include <map>
#include <set>

#include "base/agreement.hpp"
#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/checkpoint_service.hpp"
#include "checkpoint/from_rank0.hpp"
#include "checkpoint/json_text.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/schema.hpp"
#include "checkpoint/writer.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
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
  FileStructure plan;
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

std::shared_ptr<CommWorker::Task> CheckpointService::start_save(
    const SaveRequest& r, const std::optional<Error>& local_error, bool background) {
  wait_pending();
  ctx_.scheduler().quiesce();
  ctx_.before_shard_update();  // the shards as the caller's queued work leaves them
  const Group& world = ctx_.groups().world();
  agree(world, "checkpoint save arguments", request_fingerprint(r), local_error);
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

}  // namespace fsdp::ckpt
