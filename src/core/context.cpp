#include "core/context.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/agreement.hpp"
#include "base/environment.hpp"
#include "base/fingerprint.hpp"
#include "base/id_order.hpp"
#include "base/mpi_check.hpp"
#include "core/secondary_partition.hpp"
#include "core/unit.hpp"

namespace fsdp {

namespace {

// More ranks on a node than cores: every extra synchronization costs a time slice. Core counts
// are local, so ranks agree on the answer and every rank picks the same algorithm.
bool node_oversubscribed(const Group& world, const Topology& topo) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int over = cores > 0 && topo.largest_node > cores, any = 0;
  mpi_check(MPI_Allreduce(&over, &any, 1, MPI_INT, MPI_MAX, world.comm), "MPI_Allreduce");
  return any != 0;
}

// A progress thread needs MPI_THREAD_MULTIPLE; FSDP_PROGRESS_THREAD=0 turns it off.
bool progress_thread_wanted() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  const char* v = env(Env::ProgressThread);
  return provided == MPI_THREAD_MULTIPLE && !(v && std::strcmp(v, "0") == 0);
}

}  // namespace

std::unique_ptr<Context> Context::create(MPI_Comm comm, const ContextOptions& options,
                                         const std::optional<Error>& local_error,
                                         const BackendFactory& build_backend) {
  MPI_Comm world = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(comm, &world), "MPI_Comm_dup");
  try {
    Group g;
    g.comm = world;
    mpi_check(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(world, &g.rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(world, &g.size), "MPI_Comm_size");
    agree(g, "configurations (cfg and FSDP_* environment)", options.fingerprint(), local_error);
    agree_on_environment(g);
    const Topology topo = discover_topology(world);
    ContextOptions tuned = options;
    if (env(Env::RingPieceBytes) == nullptr && node_oversubscribed(g, topo))
      tuned.transport.ring_piece_bytes = 0;
    const int factor = resolve_sharding_factor(options.strategy, options.sharding_factor, topo);
    auto groups = std::make_unique<ProcessGroups>(world, topo, factor,
                                                  hpz_node_ranks(options.hpz, factor, topo));
    world = MPI_COMM_NULL;  // owned by `groups` from here on
    return std::unique_ptr<Context>(new Context(std::move(groups), topo, tuned, build_backend));
  } catch (...) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (world != MPI_COMM_NULL && !finalized) MPI_Comm_free(&world);
    throw;
  }
}

// Collective (the backend agrees on the device setup and may create NCCL communicators).
Context::Context(std::unique_ptr<ProcessGroups> groups, const Topology& topo,
                 const ContextOptions& options, const BackendFactory& build_backend)
    : options_(options), groups_(std::move(groups)), node_leader_(topo.node_leader) {
  backend_ = build_backend(options_.placement, options_.transport, *groups_, topo, accounting_);
  partial_sums_ = std::make_unique<Scratch>(memory(), accounting_);
  trace_ = std::make_unique<Trace>(groups_->world().rank);
  worker_ = std::make_unique<CommWorker>(progress_thread_wanted());
  scheduler_ = std::make_unique<Scheduler>(*this, units_);
  step_boundary_ = std::make_unique<StepBoundary>(*this);
  if (options_.debug_collectives) check_ = std::make_unique<CollectiveCheck>(groups_->world());
  if (options_.timeout_s > 0)
    watchdog_ = std::make_unique<Watchdog>(call_log_, options_.timeout_s, options_.timeout_abort,
                                           groups_->world().comm, groups_->world().rank,
                                           [this](const std::string& r) { interrupt(r); });
}

Context::~Context() {
  {
    // The teardown waits (a background save, collectives in flight, the progress thread): it is
    // a call the watchdog watches, so a wait a dead peer never ends is reported, interrupted and,
    // if stuck inside MPI or NCCL, ends the job after the grace period: never a silent hang.
    CallInfo teardown;
    teardown.call = "fsdp_finalize";
    teardown.collective = false;
    CallScope scope(call_log_, teardown);
    // This rank's update phase ends first: a peer still reading its shards one-sidedly (an
    // evaluation on one rank) waits for that, and the teardown below waits for the peer.
    try {
      step_boundary_->end_update();
    } catch (...) {  // an MPI failure: the teardown goes on
    }
    // Waits for a background save; it uses its own communicators.
    parts_[static_cast<int>(PartSlot::Checkpoints)].reset();
    worker_->drain();
    for (auto& [id, u] : units_) {
      try {
        u->complete_pending();
      } catch (...) {  // reported to nobody: the context is going
      }
    }
    scheduler_->clear_requests();
    parts_[static_cast<int>(PartSlot::Optimizers)].reset();  // they use units
    units_.clear();  // units return their buffers to the pool before it goes
    // The windows of units used by any subset of ranks, freed together (collective), unless
    // aborted (a peer may never come).
    if (aborted()) step_boundary_->abandon();
    step_boundary_.reset();
    worker_.reset();
    partial_sums_.reset();  // before the memory spaces of the backend
    {
      // From here the watchdog's interrupt leaves the transport alone (it is going), and the
      // job still ends after the grace period if its teardown never returns.
      std::lock_guard<std::mutex> lock(abort_mutex_);
      tearing_down_ = true;
    }
    backend_.reset();  // the transport's teardown (NCCL: stream wait, ncclCommDestroy) is watched
  }
  watchdog_.reset();
}

void Context::abort() {
  // Under the lock, so that the teardown never frees the transport under it (bounded: a
  // transport's abort waits at most 10 s for a call stuck inside it).
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_ || tearing_down_) return;
  abort_reason_ = "fsdp_abort was called";
  aborted_.store(true, std::memory_order_release);
  transport().abort();
}

void Context::interrupt(const std::string& report) {
  std::lock_guard<std::mutex> lock(abort_mutex_);  // as in abort()
  if (aborted_) return;
  abort_reason_ = "watchdog timeout: " + report;
  aborted_.store(true, std::memory_order_release);
  if (!tearing_down_) transport().interrupt_for_timeout();
}

std::string Context::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  return abort_reason_;
}

CallScope Context::begin_call(const CallInfo& call) {
  // First: a call that may wait for other ranks ends this rank's update phase, which they may
  // be waiting for (core/step_boundary.hpp).
  step_boundary_->at_call(call);
  if (check_ && call.collective) {
    auto stop = [this] {
      if (aborted()) fail(Errc::Timeout, "interrupted: " + abort_reason());
    };
    try {
      check_->check(call, options_.timeout_s, call_log_, stop);
    } catch (const Error& e) {
      if (e.code() == Errc::Timeout) interrupt(e.what());
      throw;
    }
  }
  return CallScope(call_log_, call);
}

Unit& Context::create_unit(std::vector<ParamSpec> params, const UnitRequest& request,
                           const std::optional<Error>& local_error) {
  scheduler_->quiesce();
  uint64_t fingerprint = 0;
  std::optional<FlatLayout> layout;
  Precision precision;
  std::optional<Error> local = local_error;
  if (!local)
    local = attempt([&] {
      layout.emplace(std::move(params), sharding_factor(),
                     layout_pieces(options_.strategy, groups_->replicate().size), options_.hfsdp,
                     request.layout);
      precision = resolve_precision(layout->dtype(), options_.precision, request.precision,
                                    "unit " + std::to_string(next_unit_id_));
      Fingerprint f;
      f.add(layout->fingerprint());
      f.add(static_cast<uint64_t>(precision.param));
      f.add(static_cast<uint64_t>(precision.reduce));
      f.add(request.name);
      f.add(static_cast<uint64_t>(request.source.from_rank0));
      f.add(static_cast<uint64_t>(static_cast<bool>(request.source.init)));
      f.add(static_cast<uint64_t>(request.any_ranks));
      fingerprint = f.value();
      if (request.any_ranks && placement().memory != MemoryPlace::Host)
        fail(Errc::Unsupported,
             "options->used_by = FSDP_USED_BY_ANY_RANKS: units used by any subset of ranks need "
             "a host-memory context in this version (their shards are read one-sidedly through "
             "MPI RMA windows in host memory)");
    });
  agree(groups_->world(),
        "unit descriptors and options (count, names, shapes, dtypes, requires_grad, order, "
        "precision, name, initialization, layout, used_by)",
        fingerprint, local);
  const uint64_t id = next_unit_id_;
  std::unique_ptr<Unit> unit;
  const std::optional<Error> allocation = attempt([&] {
    unit = std::make_unique<Unit>(*this, id, std::move(*layout), precision, request.name,
                                  request.any_ranks);
  });
  agree(groups_->world(), "allocation of the unit's shard", 0, allocation);
  initialize_shard(*unit, request.source);  // collective; throws on every rank together
  if (request.any_ranks) step_boundary_->initialized(id);
  Unit& ref = *unit;
  units_.emplace(id, std::move(unit));
  ++next_unit_id_;  // only on success, so ids stay equal across ranks
  return ref;
}

void Context::tie(Unit& user, const std::string& alias, Unit* owner, std::size_t owner_index,
                  const std::optional<Error>& local_error) {
  scheduler_->quiesce();
  Fingerprint f;
  if (!local_error) {
    f.add(user.id());
    f.add(alias);
    f.add(owner->id());
    f.add(static_cast<uint64_t>(owner_index));
  }
  agree(groups_->world(), "tie (user unit, alias, owner unit, parameter index)", f.value(),
        local_error);
  user.add_tie({alias, owner->id(), owner_index});
  owner->add_tied_user(user.id());
}

void Context::destroy_unit(Unit& unit) {
  for (const Tie& t : unit.ties())
    if (Unit* owner = find_unit(t.owner_id)) owner->remove_tied_user(unit.id());
  units_.erase(unit.id());
}

std::vector<Unit*> Context::units() const {
  return in_id_order(units_);
}

const Rank0Roots& Context::rank0_roots() {
  if (rank0_roots_) return *rank0_roots_;
  const ProcessGroups& g = *groups_;
  const int mine = g.world().rank == 0 ? g.shard().rank : -1;
  Rank0Roots r;
  mpi_check(MPI_Allreduce(&mine, &r.shard_root, 1, MPI_INT, MPI_MAX, g.shard().comm),
            "MPI_Allreduce");
  const int member = r.shard_root >= 0 ? g.replicate().rank : -1;
  mpi_check(MPI_Allreduce(&member, &r.replicate_root, 1, MPI_INT, MPI_MAX, g.replicate().comm),
            "MPI_Allreduce");
  rank0_roots_ = r;
  return *rank0_roots_;
}

void Context::drop_secondaries() {
  for (auto& [id, u] : units_) u->drop_secondary();
}

Unit* Context::find_unit(uint64_t id) const {
  auto it = units_.find(id);
  return it == units_.end() ? nullptr : it->second.get();
}

void Context::set_grad_sync(bool on) {
  scheduler_->quiesce();
  grad_sync_ = on;
}

void Context::trim() {
  scheduler_->quiesce();
  backend_->trim();
  partial_sums_->release();
}

std::size_t Context::unsharded_model_bytes() const {
  std::size_t bytes = 0;
  for (const auto& [id, u] : units_) bytes += u->bytes().model();
  return bytes;
}

}  // namespace fsdp
