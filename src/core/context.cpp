#include "core/context.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "checkpoint/checkpoint_service.hpp"
#include "core/agreement.hpp"
#include "core/fingerprint.hpp"
#include "core/mpi_check.hpp"
#include "core/unit.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"

namespace fsdp {

uint64_t ContextOptions::fingerprint() const {
  Fingerprint f;
  f.add(static_cast<uint64_t>(strategy));
  f.add(static_cast<uint64_t>(sharding_factor));
  f.add(static_cast<uint64_t>(grad_reduction));
  f.add(precision.param ? static_cast<uint64_t>(*precision.param) : ~uint64_t(0));
  f.add(precision.reduce ? static_cast<uint64_t>(*precision.reduce) : ~uint64_t(0));
  f.add(static_cast<uint64_t>(max_unsharded));
  f.add(static_cast<uint64_t>(transport.algorithm));
  f.add(static_cast<uint64_t>(transport.ring_min_block_bytes));
  f.add(static_cast<uint64_t>(transport.ring_piece_bytes));
  // Not the device: ranks may name their own GPUs.
  f.add(static_cast<uint64_t>(placement.memory));
  f.add(static_cast<uint64_t>(placement.cpu_offload));
  f.add(static_cast<uint64_t>(placement.transport));
  // Debug mode's exchange and the watchdog's limits must be the same everywhere.
  f.add(static_cast<uint64_t>(debug_collectives));
  uint64_t timeout_bits = 0;
  std::memcpy(&timeout_bits, &timeout_s, sizeof timeout_bits);
  f.add(timeout_bits);
  f.add(static_cast<uint64_t>(timeout_abort));
  return f.value();
}

namespace {

void read_byte_count(const char* name, std::size_t& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(v, &end, 10);
  if (*end != '\0' || v[0] == '-')
    fail(Errc::InvalidArgument,
         std::string("environment ") + name + "=" + v + ": expected a byte count");
  out = static_cast<std::size_t>(bytes);
}

// More ranks on a node than cores: every extra synchronization costs a time slice. Core counts
// are local, so ranks agree on the answer and every rank picks the same algorithm.
bool node_oversubscribed(const Group& world, const Topology& topo) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int over = cores > 0 && topo.largest_node > cores, any = 0;
  mpi_check(MPI_Allreduce(&over, &any, 1, MPI_INT, MPI_MAX, world.comm), "MPI_Allreduce");
  return any != 0;
}

// A progress thread needs MPI_THREAD_MULTIPLE; FSDP_PROGRESS_THREAD=0 turns it off.
// The objects of a by-id registry, in id order (creation order, the same on every rank).
template <class T>
std::vector<T*> pointers(const std::map<uint64_t, std::unique_ptr<T>>& by_id) {
  std::vector<T*> all;
  all.reserve(by_id.size());
  for (const auto& [id, p] : by_id) all.push_back(p.get());
  return all;
}

bool progress_thread_wanted() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  const char* env = std::getenv("FSDP_PROGRESS_THREAD");
  return provided == MPI_THREAD_MULTIPLE && !(env && std::strcmp(env, "0") == 0);
}

}  // namespace

void apply_environment(ContextOptions& options) {
  if (const char* v = std::getenv("FSDP_REDUCE_SCATTER_ALGORITHM"); v && *v) {
    if (!std::strcmp(v, "auto"))
      options.transport.algorithm = ReduceScatterAlgorithm::Auto;
    else if (!std::strcmp(v, "ring"))
      options.transport.algorithm = ReduceScatterAlgorithm::Ring;
    else if (!std::strcmp(v, "mpi"))
      options.transport.algorithm = ReduceScatterAlgorithm::Mpi;
    else
      fail(Errc::InvalidArgument, std::string("environment FSDP_REDUCE_SCATTER_ALGORITHM=") + v +
                                      ": expected auto, ring or mpi");
  }
  if (const char* v = std::getenv("FSDP_TRANSPORT"); v && *v) {
    if (!std::strcmp(v, "auto"))
      options.placement.transport = TransportKind::Auto;
    else if (!std::strcmp(v, "mpi"))
      options.placement.transport = TransportKind::Mpi;
    else if (!std::strcmp(v, "nccl"))
      options.placement.transport = TransportKind::Nccl;
    else if (!std::strcmp(v, "shm"))
      options.placement.transport = TransportKind::Shm;
    else if (!std::strcmp(v, "shm_zero_copy"))
      options.placement.transport = TransportKind::ShmZeroCopy;
    else
      fail(Errc::InvalidArgument, std::string("environment FSDP_TRANSPORT=") + v +
                                      ": expected auto, mpi, shm, shm_zero_copy or nccl");
  }
  read_byte_count("FSDP_RING_MIN_BLOCK_BYTES", options.transport.ring_min_block_bytes);
  read_byte_count("FSDP_RING_PIECE_BYTES", options.transport.ring_piece_bytes);
  if (const char* v = std::getenv("FSDP_DEBUG_COLLECTIVES"); v && *v) {
    if (std::strcmp(v, "0") && std::strcmp(v, "1"))
      fail(Errc::InvalidArgument,
           std::string("environment FSDP_DEBUG_COLLECTIVES=") + v + ": expected 0 or 1");
    options.debug_collectives = v[0] == '1';
  }
  if (const char* v = std::getenv("FSDP_TIMEOUT"); v && *v) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (*end != '\0' || !(seconds == seconds) || seconds > 1e9)
      fail(Errc::InvalidArgument, std::string("environment FSDP_TIMEOUT=") + v +
                                      ": expected seconds (0: the default, negative: none)");
    options.timeout_s = seconds == 0.0 ? kDefaultTimeoutSeconds : seconds;
  }
  if (const char* v = std::getenv("FSDP_ON_TIMEOUT"); v && *v) {
    if (!std::strcmp(v, "error"))
      options.timeout_abort = false;
    else if (!std::strcmp(v, "abort"))
      options.timeout_abort = true;
    else
      fail(Errc::InvalidArgument,
           std::string("environment FSDP_ON_TIMEOUT=") + v + ": expected error or abort");
  }
}

std::unique_ptr<Context> Context::create(MPI_Comm comm, const ContextOptions& options,
                                         const std::optional<Error>& local_error) {
  MPI_Comm world = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(comm, &world), "MPI_Comm_dup");
  try {
    Group g;
    g.comm = world;
    mpi_check(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(world, &g.rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(world, &g.size), "MPI_Comm_size");
    agree(g, "configurations (cfg and FSDP_* environment)", options.fingerprint(), local_error);
    const Topology topo = discover_topology(world);
    ContextOptions tuned = options;
    if (std::getenv("FSDP_RING_PIECE_BYTES") == nullptr && node_oversubscribed(g, topo))
      tuned.transport.ring_piece_bytes = 0;
    const int factor = resolve_sharding_factor(options.strategy, options.sharding_factor, topo);
    auto groups = std::make_unique<ProcessGroups>(world, topo, factor);
    world = MPI_COMM_NULL;  // owned by `groups` from here on
    return std::unique_ptr<Context>(new Context(std::move(groups), topo, tuned));
  } catch (...) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (world != MPI_COMM_NULL && !finalized) MPI_Comm_free(&world);
    throw;
  }
}

// Collective (the backend agrees on the device setup and may create NCCL communicators).
Context::Context(std::unique_ptr<ProcessGroups> groups, const Topology& topo,
                 const ContextOptions& options)
    : options_(options), groups_(std::move(groups)) {
  backend_ = std::make_unique<Backend>(options_.placement, options_.transport, *groups_, topo,
                                       accounting_);
  pool_ = std::make_unique<BufferPool>(memory(), accounting_);
  partial_sums_ = std::make_unique<Scratch>(memory(), accounting_);
  trace_ = std::make_unique<Trace>(groups_->world().rank);
  worker_ = std::make_unique<CommWorker>(progress_thread_wanted());
  if (options_.debug_collectives) check_ = std::make_unique<CollectiveCheck>(groups_->world());
  if (options_.timeout_s > 0)
    watchdog_ = std::make_unique<Watchdog>(call_log_, options_.timeout_s, options_.timeout_abort,
                                           groups_->world().comm, groups_->world().rank,
                                           [this](const std::string& r) { interrupt(r); });
}

Context::~Context() {
  watchdog_.reset();
  checkpoints_.reset();  // waits for a background save; it uses its own communicators
  worker_->drain();
  for (auto& [id, u] : units_) {
    try {
      u->complete_pending();
    } catch (...) {  // reported to nobody: the context is going
    }
  }
  requests_.clear();
  optimizers_.clear();  // they use units
  scalers_.clear();
  units_.clear();  // units return their buffers to the pool before it goes
  worker_.reset();
  partial_sums_.reset();
  pool_.reset();  // before the memory spaces of the backend
}

void Context::abort() {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    abort_reason_ = "fsdp_abort was called";
    aborted_.store(true, std::memory_order_release);
  }
  transport().abort();
}

void Context::interrupt(const std::string& report) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    abort_reason_ = "watchdog timeout: " + report;
    aborted_.store(true, std::memory_order_release);
  }
  transport().interrupt_for_timeout();
}

std::string Context::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  return abort_reason_;
}

CallScope Context::begin_call(const CallInfo& call) {
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
  quiesce();
  uint64_t fingerprint = 0;
  std::optional<FlatLayout> layout;
  Precision precision;
  std::optional<Error> local = local_error;
  if (!local) {
    try {
      layout.emplace(std::move(params), sharding_factor());
      precision = resolve_precision(layout->dtype(), options_.precision, request.precision,
                                    "unit " + std::to_string(next_unit_id_));
      Fingerprint f;
      f.add(layout->fingerprint());
      f.add(static_cast<uint64_t>(precision.param));
      f.add(static_cast<uint64_t>(precision.reduce));
      f.add(request.name);
      f.add(static_cast<uint64_t>(request.source.from_rank0));
      f.add(static_cast<uint64_t>(static_cast<bool>(request.source.init)));
      fingerprint = f.value();
    } catch (const Error& e) {
      local = e;
    }
  }
  agree(groups_->world(),
        "unit descriptors and options (count, names, shapes, dtypes, requires_grad, order, "
        "precision, name, initialization)",
        fingerprint, local);
  const uint64_t id = next_unit_id_;
  std::unique_ptr<Unit> unit;
  std::optional<Error> allocation;
  try {
    unit = std::make_unique<Unit>(*this, id, std::move(*layout), precision, request.name);
  } catch (const Error& e) {
    allocation = e;
  }
  agree(groups_->world(), "allocation of the unit's shard", 0, allocation);
  initialize_shard(*unit, request.source);  // collective; throws on every rank together
  Unit& ref = *unit;
  units_.emplace(id, std::move(unit));
  ++next_unit_id_;  // only on success, so ids stay equal across ranks
  return ref;
}

void Context::tie(Unit& user, const std::string& alias, Unit* owner, std::size_t owner_index,
                  const std::optional<Error>& local_error) {
  quiesce();
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

Optimizer& Context::create_optimizer(OptimizerKind kind, const HyperParams& defaults,
                                     std::vector<Unit*> units,
                                     const std::optional<Error>& local_error) {
  quiesce();
  Fingerprint f;
  if (!local_error) {
    f.add(static_cast<uint64_t>(kind));
    f.add(defaults.fingerprint());
    for (const Unit* u : units) f.add(u->id());
  }
  agree(groups_->world(), "optimizer settings (kind, hyperparameters, units)", f.value(),
        local_error);
  const uint64_t id = next_optimizer_id_++;
  auto opt = std::make_unique<Optimizer>(*this, id, kind, defaults, std::move(units));
  Optimizer& ref = *opt;
  optimizers_.emplace(id, std::move(opt));
  return ref;
}

void Context::destroy_optimizer(Optimizer& opt) {
  optimizers_.erase(opt.id());
}

std::vector<Optimizer*> Context::optimizers() const {
  return pointers(optimizers_);
}

GradScaler& Context::create_grad_scaler(double init_scale, double growth, double backoff,
                                        int interval, const std::optional<Error>& local_error) {
  quiesce();
  Fingerprint f;
  for (double d : {init_scale, growth, backoff}) f.add_double(d);
  f.add(static_cast<uint64_t>(interval));
  agree(groups_->world(), "grad scaler settings", local_error ? 0 : f.value(), local_error);
  const uint64_t id = next_scaler_id_++;
  auto s = std::make_unique<GradScaler>(*this, id, init_scale, growth, backoff, interval);
  GradScaler& ref = *s;
  scalers_.emplace(id, std::move(s));
  return ref;
}

void Context::destroy_grad_scaler(GradScaler& s) {
  scalers_.erase(s.id());
}

std::vector<GradScaler*> Context::grad_scalers() const {
  return pointers(scalers_);
}

std::vector<Unit*> Context::units() const {
  return pointers(units_);
}

void Context::quiesce() {
  worker_->drain();
  for (auto& [id, u] : units_) u->complete_pending();
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

Unit* Context::find_unit(uint64_t id) const {
  auto it = units_.find(id);
  return it == units_.end() ? nullptr : it->second.get();
}

Request& Context::add_request(const Unit& unit, std::shared_ptr<CommWorker::Task> task) {
  Request& r = add_request(std::move(task));
  r.unit_id = unit.id();
  return r;
}

ckpt::CheckpointService& Context::checkpoints() {
  if (!checkpoints_) checkpoints_ = std::make_unique<ckpt::CheckpointService>(*this);
  return *checkpoints_;
}

Request& Context::add_request(std::shared_ptr<CommWorker::Task> task) {
  auto r = std::make_unique<Request>();
  r->context = this;
  r->id = next_request_id_++;
  r->task = std::move(task);
  Request& ref = *r;
  requests_.emplace(ref.id, std::move(r));
  return ref;
}

void Context::wait(Request& r) {
  const uint64_t id = r.id;
  std::shared_ptr<CommWorker::Task> task = r.task;
  Unit* u = find_unit(r.unit_id);
  requests_.erase(id);  // forgotten whatever the outcome
  if (!task) return;
  if (u && u->pending_task() == task)
    u->complete_pending();
  else
    task->wait();  // already applied by an implicit wait; rethrows its error if it had one
}

std::vector<Request*> Context::requests() const {
  return pointers(requests_);
}

int Context::held_units() const {
  int n = 0;
  for (const auto& [id, u] : units_)
    n += u->is_unsharded() || u->pending() == Unit::Pending::Reduce;
  return n;
}

void Context::make_room() {
  while (held_units() >= options_.max_unsharded) {
    Unit* oldest = nullptr;
    for (const auto& [id, u] : units_)
      if (u->pending() == Unit::Pending::Reduce &&
          (!oldest || u->pending_sequence() < oldest->pending_sequence()))
        oldest = u.get();
    if (!oldest) return;
    oldest->complete_pending();
  }
}

void Context::begin_phase(Phase p) {
  if (p == Phase::Forward) {
    quiesce();
    Fingerprint f;
    for (int k = 1; k <= 2; ++k) {
      previous_[k] = std::move(recorded_[k]);
      recorded_[k].clear();
      f.add(static_cast<uint64_t>(previous_[k].size()));
      for (uint64_t id : previous_[k]) f.add(id);
    }
    agree(groups_->world(), "unshard orders of the previous iteration (prefetch)", f.value(),
          std::nullopt);
  }
  phase_ = p;
}

std::shared_ptr<CommWorker::Task> Context::caller_unshard(Unit& u, bool async) {
  std::shared_ptr<CommWorker::Task> task = !async && u.pending() == Unit::Pending::Unshard
                                               ? u.pending_task()
                                               : u.unshard_async(/*now=*/!async);
  prefetch_after(u);
  return task;
}

void Context::prefetch_after(Unit& u) {
  if (phase_ == Phase::None) return;
  const int k = static_cast<int>(phase_);
  std::vector<uint64_t>& rec = recorded_[k];
  rec.push_back(u.id());
  const std::vector<uint64_t>& prev = previous_[k];
  const std::size_t pos = rec.size() - 1;
  // Only while this iteration follows the previous one's order; the same decision on every rank.
  if (!prefetch_[k] || pos + 1 >= prev.size() || prev[pos] != u.id()) return;
  Unit* next = find_unit(prev[pos + 1]);
  if (!next || next->is_unsharded()) return;
  make_room();
  if (held_units() >= options_.max_unsharded) return;  // held by the caller: skip, do not block
  next->unshard_async();
}

void Context::trim() {
  quiesce();
  pool_->trim();
  backend_->release_scratch();
  partial_sums_->release();
}

std::size_t Context::unsharded_model_bytes() const {
  std::size_t bytes = 0;
  for (const auto& [id, u] : units_) bytes += u->layout().numel() * u->layout().element_size();
  return bytes;
}

}  // namespace fsdp
