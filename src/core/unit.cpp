#include "core/unit.hpp"

#include "base/error.hpp"
#include "core/context.hpp"
#include "core/shard_window.hpp"

namespace fsdp {

Unit::Unit(Context& ctx, uint64_t id, FlatLayout layout, const Precision& precision,
           std::string name, bool any_ranks)
    : ctx_(ctx),
      id_(id),
      layout_(std::move(layout)),
      precision_(precision),
      name_(std::move(name)),
      trace_name_(name_.empty() ? "unit " + std::to_string(id) : name_),
      shard_rank_(ctx.groups().shard().rank),
      update_piece_(layout_.update_pieces() > 1 ? ctx.groups().replicate().rank : 0) {
  MemorySpace& shards = ctx_.shard_memory();
  // Collective over the storage's team (unit creation is collective), before anything that may
  // fail on one rank only; a unit used by any subset of ranks has its shard in a window instead
  // (collective over the shard group), for its unsharded copies follow no collective order.
  if (any_ranks) {
    window_ = &ctx_.step_boundary().add_window(id, shard_bytes());
    shard_ = window_->data();
  } else if (void* home =
                 ctx_.unsharded_storage().place(unsharded_, unsharded_bytes(), shard_is_a_block()))
    shard_ = static_cast<char*>(home) + static_cast<std::size_t>(shard_rank_) * shard_bytes();
  else
    shard_ = shards.allocate(shard_bytes());
  try {
    gathered_ = ctx_.memory().new_mark();
    grad_ready_ = ctx_.memory().new_mark();
  } catch (...) {
    if (!zero_copy() && !window_) shards.deallocate(shard_, shard_bytes());
    throw;
  }
  ctx_.accounting().add(MemoryKind::Shard, shard_bytes());
  shards.zero(shard_, shard_bytes());  // padding, and parameters given no values
}

Unit::~Unit() {
  release_unsharded();
  full_grad_.reset();
  // Zero-copy storage: the lease lets the block go when the unit goes (local; the block is reused
  // once every team rank let it go). A window is freed with the context (collectively).
  if (!zero_copy() && !window_) ctx_.shard_memory().deallocate(shard_, shard_bytes());
  ctx_.accounting().sub(MemoryKind::Shard, shard_bytes());
  if (grad_shard_) {
    ctx_.shard_memory().deallocate(grad_shard_, grad_shard_bytes());
    ctx_.accounting().sub(MemoryKind::GradShard, grad_shard_bytes());
  }
}

std::string Unit::label() const {
  std::string l = "unit " + std::to_string(id_);
  if (!name_.empty()) l += " ('" + name_ + "')";
  return l;
}

char* Unit::element(void* base, std::size_t i, DType t) const {
  return static_cast<char*>(base) + i * dtype_size(t);
}

// Each section's all-gather into its place in `full`. In mixed precision (and with CPU offload,
// where the shard is in host memory the transport does not take) this rank's block of each
// section was already filled with its shard, rounded to param_dtype, by unshard_async, and the
// all-gather runs in place: no staging buffer.
void Unit::gather_sections(const Located& full) {
  const DType p = precision_.param;
  if (!layout_.blocked()) {
    gather_pieces(full);
    return;
  }
  for (SectionKind k : {SectionKind::Trainable, SectionKind::Frozen}) {
    const Section& s = layout_.section(k);
    if (s.numel == 0) continue;
    const Located out = full.at(s.flat_base * dtype_size(p));
    const void* own = own_block_copied() ? nullptr : block(k);
    ctx_.transport().all_gather(own, out, s.shard_numel, p, ctx_.groups().shard());
  }
  ctx_.memory().record(gathered_.get());
}

// The dim-0 layout: each section's blocks placed piece by piece, by the transport where it can
// (the host transports), else all-gathered rank after rank into gather_scratch_ and copied to
// their places (NCCL, MPI through staging). Where this rank's block is not in param_dtype
// (own_block_copied) it is rounded into gather_scratch_ first (unshard_async sized it).
void Unit::gather_pieces(const Located& full) {
  const DType p = precision_.param;
  const std::size_t es = dtype_size(p);
  Transport& transport = ctx_.transport();
  const Group& g = ctx_.groups().shard();
  const bool direct = transport.places_pieces(g);
  for (SectionKind k : {SectionKind::Trainable, SectionKind::Frozen}) {
    const Section& s = layout_.section(k);
    if (s.numel == 0) continue;
    const Located out = full.at(s.flat_base * es);
    // Null on the direct path without a conversion (nothing needs it).
    char* scratch = static_cast<char*>(gather_scratch_.data());
    const void* own = block(k);
    char* own_copy = nullptr;
    if (own_block_copied()) {
      // This rank's block in param_dtype: in the scratch at its own place (the copy-out's
      // input), or, placed directly, at its section's place in a shard-sized scratch.
      own_copy =
          direct ? scratch + s.shard_base * es
                 : scratch +
                       (s.flat_base + static_cast<std::size_t>(shard_rank_) * s.shard_numel) * es;
      ctx_.memory().kernels().convert(own_copy, p, block(k), bytes().block_dtype(k), s.shard_numel);
      own = own_copy;
    }
    if (direct) {
      transport.all_gather_pieces(own, out, s.shard_numel, p, g, layout_.pieces(k));
      continue;
    }
    char* blocks = scratch + s.flat_base * es;
    transport.all_gather(own_copy ? nullptr : own, Located::private_memory(blocks), s.shard_numel,
                         p, g);
    char* to = static_cast<char*>(out.data);
    for_each_piece(
        layout_.pieces(k), s.shard_numel, 0, g.size,
        [&](std::size_t at, std::size_t from, std::size_t n) {
          ctx_.memory().copy(to + at * es, blocks + from * es, n * es);
        },
        [](std::size_t, std::size_t) {});
  }
  ctx_.memory().record(gathered_.get());
}

// The dim-0 layout: the full gradient (`in`, in dtype `from`) put rank after rank in reduce_dtype
// for the reduce-scatter, the padding of each block zero.
void Unit::place_for_reduce(void* out, const void* in, DType from) {
  const DType r = precision_.reduce;
  const Section& s = layout_.section(SectionKind::Trainable);
  Kernels& kernels = ctx_.memory().kernels();
  char* o = static_cast<char*>(out);
  const char* i = static_cast<const char*>(in);
  for_each_piece(
      layout_.pieces(SectionKind::Trainable), s.shard_numel, 0, layout_.shard_count(),
      [&](std::size_t at, std::size_t to, std::size_t n) {
        kernels.convert(o + to * dtype_size(r), r, i + at * dtype_size(from), from, n);
      },
      [&](std::size_t to, std::size_t n) {
        ctx_.memory().zero(o + to * dtype_size(r), n * dtype_size(r));
      });
}

void Unit::copy_own_blocks(void* full) {
  const DType p = precision_.param;
  for (SectionKind k : {SectionKind::Trainable, SectionKind::Frozen}) {
    const Section& s = layout_.section(k);
    if (s.numel)
      ctx_.memory().kernels().convert(
          element(full, s.flat_base + static_cast<std::size_t>(shard_rank_) * s.shard_numel, p), p,
          block(k), bytes().block_dtype(k), s.shard_numel);
  }
}

char* Unit::block(SectionKind k) const {
  return static_cast<char*>(shard_) + bytes().block_offset(k);
}

void Unit::release_unsharded() {
  copy_intact_.reset();
  storage().release(unsharded_);
}

UnshardedStorage& Unit::storage() const {
  return window_ ? ctx_.step_boundary().private_storage() : ctx_.unsharded_storage();
}

bool Unit::shard_is_a_block() const {
  // No conversion, the shard where the transport takes it (no CPU offload), and at most one
  // non-empty section (with two, a shard is two blocks far apart).
  return layout_.blocked() && precision_.param == precision_.storage &&
         !ctx_.placement().cpu_offload &&
         (layout_.sections()[0].numel == 0 || layout_.sections()[1].numel == 0);
}

bool Unit::own_block_copied() const {
  return precision_.param != precision_.storage || ctx_.placement().cpu_offload;
}

std::shared_ptr<CommWorker::Task> Unit::track(Pending kind,
                                              std::shared_ptr<CommWorker::Task> task) {
  pending_ = kind;
  pending_task_ = task;
  pending_sequence_ = ctx_.scheduler().next_sequence();
  return task;
}

void Unit::complete_pending() {
  if (pending_ == Pending::None) return;
  const Pending kind = pending_;
  std::shared_ptr<CommWorker::Task> task = std::move(pending_task_);
  pending_ = Pending::None;
  const bool by_prefetch = kind == Pending::Unshard && gathered_by_prefetch_;
  gathered_by_prefetch_ = false;
  auto failed = [&] {
    if (kind == Pending::Unshard) {  // a failed all-gather leaves it sharded, claimed or not
      secondary_.drop();
      release_unsharded();
      gather_scratch_.reset();
      prefetched_ = false;
    } else {  // the gradient did not reach the shard
      grad_written_ = true;
    }
    reduce_copy_.reset();
  };
  try {
    TraceSpan span(ctx_.trace(), "wait", trace_name(), 0);
    task->wait();
  } catch (const Error& e) {
    failed();
    if (!by_prefetch) throw;
    // Not the caller's operation (even once claimed): say so, whichever call waited for it.
    throw Error(e.code(), "the prefetch libfsdp started on its own for " + label() +
                              " (fsdp_set_prefetch) failed; the unit stays sharded: " + e.what());
  } catch (...) {
    failed();
    throw;
  }
  if (kind == Pending::Unshard) {
    secondary_.drop();  // hpZ: read by this all-gather, if kept
    gather_scratch_.reset();
  }
  if (kind == Pending::Reduce) {
    grad_shard_is_zero_ = false;
    full_grad_.reset();
    reduce_copy_.reset();
  }
}

std::optional<Error> Unit::unshard_refusal(bool async) const {
  // An unshard of a prefetched unit claims the prefetch; a synchronous unshard of a unit whose
  // asynchronous unshard is in flight waits for it.
  if (!held_by_caller() || (!async && pending_ == Pending::Unshard)) return std::nullopt;
  return Error(Errc::State, label() + " is already unsharded" +
                                (pending_ == Pending::Unshard
                                     ? " or gathering (fsdp_unshard_async): fsdp_unshard waits "
                                       "for it, fsdp_wait completes it"
                                     : " (call fsdp_reshard first)"));
}

void Unit::release_prefetch(const char* when) {
  if (!prefetched_) return;
  TraceSpan span(ctx_.trace(), "prefetch_unused", trace_name(), unsharded_bytes());
  if (pending_ == Pending::Unshard) {
    try {
      complete_pending();
    } catch (const Error& e) {
      throw Error(e.code(), std::string(e.what()) + " (found " + when + ")");
    }
  }
  prefetched_ = false;
  // Whatever reuses the buffer queues after the all-gather that filled it; nobody read it.
  release_unsharded();
}

bool Unit::accumulates_wider() const {
  return dtype_size(precision_.reduce) > dtype_size(precision_.param);
}

void Unit::fold_into_accumulated() {
  if (!full_grad_) return;  // nothing written since the last fold
  const std::size_t n = layout_.grad_padded_numel();
  const DType r = precision_.reduce, p = precision_.param;
  ctx_.memory().take_from_caller();  // the gradient the caller computed on its stream
  if (!accumulated_) {
    accumulated_ = ctx_.pool().acquire(bytes().reduce_input(), BufferPool::Use::ReduceCopies);
    ctx_.memory().kernels().convert(accumulated_.data(), r, full_grad_.data(), p, n);
  } else {
    ctx_.memory().kernels().scaled(accumulated_.data(), r, full_grad_.data(), p, n, 1.0,
                                   Store::Accumulate);
  }
  full_grad_.reset();  // the next micro-batch writes into a fresh, zeroed one
}

std::optional<Error> Unit::reduce_refusal() const {
  // A reduce in flight takes the gradient written so far with it.
  if (pending_ == Pending::Reduce || (!full_grad_ && !accumulated_))
    return Error(Errc::State,
                 label() + " has no gradient to reduce: write it through fsdp_grad_data first");
  try {
    check_tied_users_done("reduce the gradients of");
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

std::shared_ptr<CommWorker::Task> Unit::unshard_async(bool now) {
  if (std::optional<Error> refusal = unshard_refusal(/*async=*/true)) throw *refusal;
  complete_pending();  // a reduce in flight
  if (window_) {
    unshard_one_sided();
    return nullptr;  // done: nothing to wait for
  }
  ctx_.scheduler().make_room();  // the caller blocks rather than allocating more
  TraceSpan span(ctx_.trace(), "unshard", trace_name(), unsharded_bytes());
  // hpZ: from this rank's node only when it kept a secondary (a unit of a context where hpZ
  // means something never has one in place: the shard group spans nodes).
  const bool from_node = secondary_.held();
  // The dim-0 layout (gather_pieces): the all-gather lands rank after rank here where the
  // transport cannot place the pieces itself, else this rank's block rounded to param_dtype
  // where it must be. Taken before anything is held (a failure leaves the unit sharded); held
  // until the unshard completes.
  if (!layout_.blocked() && !from_node) {
    const bool direct = ctx_.transport().places_pieces(ctx_.groups().shard());
    const std::size_t own = layout_.shard_numel() * dtype_size(precision_.param);
    if (!direct || own_block_copied())
      gather_scratch_ =
          ctx_.pool().acquire(direct ? own : unsharded_bytes(), BufferPool::Use::Parameters);
  }
  // Held from here on, and counted; the storage may pick the copy itself only in collective
  // order, on the progress thread, where this rank's blocks are then written into it.
  UnshardedStorage& storage = this->storage();
  try {
    storage.claim(unsharded_, unsharded_bytes());
  } catch (...) {
    gather_scratch_.reset();
    throw;
  }
  ctx_.memory().take_from_caller();  // the caller may have written the shard on its stream
  hold_wrote_grad_ = false;
  auto body = [this, &storage, now, from_node] {
    TraceSpan s(ctx_.trace(), from_node ? "all_gather_node" : "all_gather", trace_name(),
                unsharded_bytes(), now ? 0 : 1);
    const Located full = storage.acquire(unsharded_);
    if (full.data && from_node) {
      secondary_.gather(*this, full);
      ctx_.memory().record(gathered_.get());
    } else if (full.data) {
      if (own_block_copied() && layout_.blocked()) copy_own_blocks(full.data);
      gather_sections(full);
    } else {  // the shards are in place: nothing moves
      ctx_.memory().record(gathered_.get());
    }
    storage.seal(unsharded_);
  };
  CommWorker& w = ctx_.worker();
  return track(Pending::Unshard, now ? w.run_inline(body) : w.submit(body));
}

void Unit::unshard_one_sided() {
  TraceSpan span(ctx_.trace(), "unshard_one_sided", trace_name(), unsharded_bytes());
  StepBoundary& steps = ctx_.step_boundary();
  const Group& g = ctx_.groups().shard();
  std::vector<int> peers;  // whose shards are read: each must have ended its update first
  for (int r = 0; r < g.size; ++r)
    if (r != shard_rank_) peers.push_back(steps.shard_world_ranks()[static_cast<std::size_t>(r)]);
  steps.wait_for_updates(peers);
  UnshardedStorage& st = storage();
  st.claim(unsharded_, unsharded_bytes());
  try {
    char* full = static_cast<char*>(st.acquire(unsharded_).data);
    const DType p = precision_.param;
    Kernels& kernels = ctx_.memory().kernels();
    for (SectionKind k : {SectionKind::Trainable, SectionKind::Frozen}) {
      const Section& s = layout_.section(k);
      if (s.numel == 0) continue;
      const DType bt = bytes().block_dtype(k);
      const std::size_t block_bytes = s.shard_numel * dtype_size(bt);
      // Every rank's block rank after rank: straight into place when that is the layout and no
      // conversion is needed (the all-gather's output), else into a scratch first.
      const bool direct = layout_.blocked() && bt == p;
      Lease scratch;
      if (!direct)
        scratch = ctx_.pool().acquire(block_bytes * static_cast<std::size_t>(g.size),
                                      BufferPool::Use::Parameters);
      char* blocks = direct ? element(full, s.flat_base, p) : static_cast<char*>(scratch.data());
      for (int r = 0; r < g.size; ++r) {
        char* to = blocks + static_cast<std::size_t>(r) * block_bytes;
        if (r == shard_rank_)
          ctx_.memory().copy(to, block(k), block_bytes);
        else
          window_->get(r, bytes().block_offset(k), block_bytes, to);
      }
      window_->flush();
      if (direct) continue;
      if (layout_.blocked()) {
        kernels.convert(element(full, s.flat_base, p), p, blocks, bt,
                        s.shard_numel * static_cast<std::size_t>(g.size));
        continue;
      }
      for_each_piece(
          layout_.pieces(k), s.shard_numel, 0, g.size,
          [&](std::size_t at, std::size_t from, std::size_t n) {
            kernels.convert(element(full, s.flat_base + at, p), p, blocks + from * dtype_size(bt),
                            bt, n);
          },
          [](std::size_t, std::size_t) {});
    }
  } catch (...) {
    release_unsharded();  // left sharded, as a failed all-gather leaves it
    throw;
  }
  st.seal(unsharded_);
  hold_wrote_grad_ = false;
  ctx_.memory().record(gathered_.get());
}

void Unit::remove_tied_user(uint64_t id) {
  for (std::size_t k = 0; k < tied_users_.size(); ++k)
    if (tied_users_[k] == id) {
      tied_users_.erase(tied_users_.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
}

void Unit::check_tie(const std::string& alias, const Unit& owner) const {
  if (&owner.ctx_ != &ctx_)
    fail(Errc::InvalidArgument, "owner: " + owner.label() + " belongs to another context");
  if (&owner == this)
    fail(Errc::InvalidArgument,
         "owner: the same unit as user; a parameter used twice in one unit needs no tie");
  std::vector<std::string> aliases;
  for (const Tie& t : ties_) aliases.push_back(t.alias);
  check_tie_names(layout_.params(), aliases, label(), alias, !owner.ties().empty(), owner.label());
}

void check_tie_names(const std::vector<ParamSpec>& user_params,
                     const std::vector<std::string>& user_aliases, const std::string& user,
                     const std::string& alias, bool owner_uses_ties, const std::string& owner) {
  for (const ParamSpec& p : user_params)
    if (p.name == alias)
      fail(Errc::InvalidArgument, "alias = '" + alias + "': already a parameter of " + user);
  for (const std::string& a : user_aliases)
    if (a == alias)
      fail(Errc::InvalidArgument, "alias = '" + alias + "': already a tie of " + user);
  if (owner_uses_ties)
    fail(Errc::InvalidArgument,
         "owner: " + owner + " uses ties itself; tie to the unit that stores the parameter");
}

std::optional<Error> Unit::destroy_refusal() const {
  if (pending_ != Pending::None)
    return Error(Errc::State, label() + " has an " +
                                  (pending_ == Pending::Unshard ? "unshard" : "reduce") +
                                  " in flight: wait for it first (fsdp_wait or fsdp_unit_wait)");
  if (!tied_users_.empty())
    return Error(Errc::State, std::to_string(tied_users_.size()) + " unit(s) use parameters of " +
                                  label() + " through ties: destroy them first");
  if (users_ > 0)
    return Error(Errc::State, label() + " is used by " + std::to_string(users_) +
                                  " optimizer(s): destroy them first");
  return std::nullopt;
}

void Unit::check_tied_users_done(const char* doing) const {
  for (uint64_t id : tied_users_) {
    const Unit* user = ctx_.find_unit(id);
    if (!user || !user->held_by_caller()) continue;
    for (const Tie& t : user->ties())
      if (t.owner_id == id_)
        fail(Errc::State, "cannot " + std::string(doing) + " " + label() + ": " + user->label() +
                              " uses its parameter '" + layout_.param(t.owner_index).name +
                              "' (as '" + t.alias + "') and is still unsharded; reshard " +
                              user->label() + " first");
  }
}

void Unit::reshard() {
  if (!held_by_caller())  // a prefetch nobody claimed is not the caller's to reshard
    fail(Errc::State, label() + " is not unsharded (call fsdp_unshard first)");
  check_tied_users_done("reshard");
  if (pending_ == Pending::Unshard) complete_pending();
  TraceSpan span(ctx_.trace(), "reshard", trace_name(), unsharded_bytes());
  // The buffer goes back to the pool: whatever reuses it queues after the caller's last use.
  ctx_.memory().take_from_caller();
  check_node_copy_once();
  const bool intact = *copy_intact_;
  // hpZ: a forward use keeps this rank's node piece (collective order needs no agreement: every
  // rank of the node group makes the same calls). An allocation failure still reshards.
  std::optional<Error> kept;
  if (intact && !hold_wrote_grad_ && !zero_copy() && !window_ && SecondaryPartition::active(ctx_)) {
    try {
      secondary_.keep(*this, unsharded_.data());
    } catch (const Error& e) {
      kept = e;
    }
  }
  release_unsharded();  // resharded either way: the hold ends, as on every other rank
  if (kept)
    throw Error(kept->code(),
                label() + " is resharded without its hpZ secondary partition: " + kept->what());
  if (!intact)
    fail(Errc::Corrupt,
         label() +
             ": its unsharded parameters changed while this rank held them (debug mode): "
             "another rank of the node wrote into the node's copy, into its own shard under "
             "zero-copy storage or through a pointer kept past its reshard. Write shards only "
             "when no rank of the node reads the unit (doc/shared-memory.md). The unit is "
             "resharded.");
}

void Unit::check_node_copy_once() {
  if (!copy_intact_) copy_intact_ = unsharded_.intact();
}

void* Unit::param_data(std::size_t i) {
  if (!prefetched_ && pending_ == Pending::Unshard) complete_pending();
  if (!held_by_caller())
    fail(Errc::State, label() +
                          " is sharded: parameters are readable only between fsdp_unshard "
                          "and fsdp_reshard");
  ctx_.memory().caller_waits(gathered_.get());
  return element(unsharded_.data(), layout_.flat_offset(i), precision_.param);
}

void Unit::acquire_full_grad() {
  if (full_grad_) return;
  Lease g = ctx_.pool().acquire(full_grad_bytes(), BufferPool::Use::Gradients);
  ctx_.memory().zero(g.data(), full_grad_bytes());  // unwritten parameters and padding add zero
  ctx_.memory().record(grad_ready_.get());
  full_grad_ = std::move(g);
}

void* Unit::grad_data(std::size_t i) {
  if (pending_ == Pending::Reduce) complete_pending();
  acquire_full_grad();
  ctx_.memory().caller_waits(grad_ready_.get());
  grad_written_ = true;
  hold_wrote_grad_ = true;  // not a forward use (hpZ)
  return element(full_grad_.data(), layout_.flat_offset(i), precision_.param);
}

void* Unit::grad_shard_storage() {
  if (!grad_shard_) {
    grad_shard_ = ctx_.shard_memory().allocate(grad_shard_bytes());
    ctx_.accounting().add(MemoryKind::GradShard, grad_shard_bytes());
    grad_shard_is_zero_ = true;
  }
  return grad_shard_;
}

void* Unit::shard_grad() {
  complete_pending();
  void* g = grad_shard_storage();
  if (grad_shard_is_zero_) {
    ctx_.shard_memory().zero(g, grad_shard_bytes());
    grad_shard_is_zero_ = false;  // the caller may write through the pointer from now on
  }
  return g;
}

std::shared_ptr<CommWorker::Task> Unit::reduce_grads_async(bool now) {
  // An all-gather in flight (a prefetch, or the caller's asynchronous unshard) completes first:
  // the unit tracks one operation at a time. A local wait: no collective decision changes.
  if (pending_ != Pending::None) complete_pending();
  if (std::optional<Error> refusal = reduce_refusal()) throw *refusal;
  // no_sync: kept for the next micro-batch to add to; a unit used by any subset of ranks keeps
  // it until the step boundary reduces it (grad_written_ stays set until then).
  if (!grad_sync() || (window_ && !at_boundary_)) {
    if (accumulates_wider()) fold_into_accumulated();
    return nullptr;
  }
  // Once every node rank has entered this reduce, the rule lets them write their shards (zero-copy
  // storage) while this rank still holds the unit: debug mode checks the node copy before that.
  if (held_by_caller()) check_node_copy_once();
  TraceSpan span(ctx_.trace(), "reduce", trace_name(), full_grad_bytes());
  ctx_.memory().take_from_caller();  // the gradient the caller computed on its stream
  void* out = grad_shard_storage();
  const Store store = grad_shard_is_zero_ ? Store::Assign : Store::Accumulate;
  const DType r = precision_.reduce;
  Located full = full_grad_.located();
  if (!layout_.blocked()) {  // put rank after rank (and converted) here, as FSDP2 copies in
    // Taken first: a failure leaves every gradient where it was.
    Lease placed = ctx_.pool().acquire(bytes().reduce_input(), BufferPool::Use::ReduceCopies);
    DType from = precision_.param;
    Lease source;
    if (accumulated_) {
      fold_into_accumulated();
      source = std::move(accumulated_);
      from = r;
    }
    place_for_reduce(placed.data(), source ? source.data() : full.data, from);
    reduce_copy_ = std::move(placed);
    full_grad_.reset();
    full = reduce_copy_.located();
  } else if (accumulated_) {  // earlier micro-batches' sum in reduce_dtype: this one adds to it
    fold_into_accumulated();
    reduce_copy_ = std::move(accumulated_);
    full = reduce_copy_.located();
  } else if (r != precision_.param) {  // converted here: the progress thread only communicates
    reduce_copy_ = ctx_.pool().acquire(bytes().reduce_input(), BufferPool::Use::ReduceCopies);
    ctx_.memory().kernels().convert(reduce_copy_.data(), r, full.data, precision_.param,
                                    layout_.grad_padded_numel());
    full_grad_.reset();
    full = reduce_copy_.located();
  }
  auto body = [this, full, r, out, store, now] {
    TraceSpan s(ctx_.trace(), "reduce_scatter", trace_name(), bytes().reduce_input(), now ? 0 : 1);
    reduce_into(full, r, out, store);
  };
  CommWorker& w = ctx_.worker();
  auto task = track(Pending::Reduce, now ? w.run_inline(body) : w.submit(body));
  grad_written_ = false;  // taken by this reduction (given back if it fails)
  grad_none_.clear();     // the reduced gradient covers every parameter again
  return task;
}

void Unit::reduce_grads() {
  if (reduce_grads_async(/*now=*/true)) complete_pending();
}

bool Unit::deferred_gradient() const {
  return window_ && grad_sync() && (full_grad_ || accumulated_);
}

void Unit::reduce_at_boundary() {
  if (!accumulated_) acquire_full_grad();  // this rank wrote none: it adds zeros
  at_boundary_ = true;
  try {
    reduce_grads();
  } catch (...) {
    at_boundary_ = false;
    throw;
  }
  at_boundary_ = false;
}

// Reduce-scatter over the shard group (and all-reduce over replicas, or with HFSDP a
// reduce-scatter across them) in reduce_dtype, divided once (by W, 1 under FSDP_REDUCE_SUM, or
// the unit's own factor), stored or added into the gradient shard in the storage dtype.
void Unit::reduce_into(const Located& full, DType r, void* out, Store store) {
  const ProcessGroups& groups = ctx_.groups();
  const double divisor = grad_divide_factor_ > 0.0 ? grad_divide_factor_
                         : ctx_.options().grad_reduction == GradReduction::Mean
                             ? static_cast<double>(groups.world().size)
                             : 1.0;
  const std::size_t n = layout_.trainable_shard_numel();
  const DType st = precision_.storage;
  if (groups.replicate().size == 1) {
    ctx_.transport().reduce_scatter(full, n, r, groups.shard(), {out, st, divisor, store});
    return;
  }
  // Hybrid: the shard group's sum, then the sum over replicas, then one division by W.
  void* partial = ctx_.partial_sums().get(bytes().partial_sum());
  ctx_.transport().reduce_scatter(full, n, r, groups.shard(), {partial, r, 1.0, Store::Assign});
  if (layout_.update_pieces() > 1) {
    // HFSDP: each replica keeps the sum of its piece alone, rounded to reduce_dtype as the
    // all-reduce rounds it, then divided and stored as hybrid does: the same bits.
    const std::size_t u = layout_.grad_shard_numel();
    void* piece = element(partial, n, r);
    ctx_.transport().reduce_scatter(Located::private_memory(partial), u, r, groups.replicate(),
                                    {piece, r, 1.0, Store::Assign});
    ctx_.memory().kernels().scaled(out, st, piece, r, u, divisor, store);
    return;
  }
  ctx_.transport().all_reduce(partial, n, r, groups.replicate());
  ctx_.memory().kernels().scaled(out, st, partial, r, n, divisor, store);
}

void Unit::gather_update_pieces() {
  if (layout_.update_pieces() == 1 || layout_.grad_shard_numel() == 0) return;
  const DType t = bytes().block_dtype(SectionKind::Trainable);
  char* trainable = block(SectionKind::Trainable);
  if (split_masters())  // the updated masters, rounded to param_dtype as an unshard rounds them
    ctx_.shard_memory().kernels().convert(
        element(trainable, layout_.update_offset(update_piece_), t), t, shard_, precision_.storage,
        layout_.grad_shard_numel());
  TraceSpan span(ctx_.trace(), "replica_all_gather", trace_name(), bytes().trainable_shard());
  ctx_.transport().all_gather(nullptr, Located::private_memory(trainable),
                              layout_.grad_shard_numel(), t, ctx_.groups().replicate());
}

void Unit::install_shard(const void* shard) {
  MemorySpace& m = ctx_.shard_memory();
  if (!split_masters()) {
    m.copy(shard_, shard, shard_bytes());
    return;
  }
  const std::size_t es = layout_.element_size();
  const Section& frozen = layout_.section(SectionKind::Frozen);
  const char* src = static_cast<const char*>(shard);
  m.copy(shard_, src + layout_.update_offset(update_piece_) * es, layout_.grad_shard_numel() * es);
  m.copy(block(SectionKind::Frozen), src + frozen.shard_base * es, frozen.shard_numel * es);
  m.kernels().convert(block(SectionKind::Trainable), precision_.param, src, precision_.storage,
                      layout_.trainable_shard_numel());
}

ShardSlice Unit::master_slice(std::size_t i) const {
  if (!split_masters()) return slice(i);
  if (layout_.param(i).requires_grad) return update_slice(i);
  ShardSlice s = slice(i);  // in the frozen block
  if (s.length)
    s.shard_offset = s.shard_offset - layout_.section(SectionKind::Frozen).shard_base +
                     bytes().block_offset(SectionKind::Frozen) / layout_.element_size();
  return s;
}

void Unit::refuse_split_shard(const char* call) const {
  if (split_masters())
    fail(Errc::Unsupported,
         std::string(call) + ": " + label() +
             ": with cfg->hfsdp and a param_dtype other than the parameters' dtype, a rank keeps "
             "its trainable block in param_dtype and 1/(F*N) of the float32 masters, not a "
             "shard in the storage dtype; fsdp_gather_params and checkpoints read the masters");
}

void Unit::refuse_piece_view(const char* what) const {
  if (layout_.update_pieces() > 1)
    fail(Errc::Unsupported,
         label() + ": with cfg->hfsdp " + what +
             " covers this rank's 1/(F*N) piece of the unit, which the library's optimizers "
             "update (fsdp_optimizer_step); a caller's view of it is not supported with HFSDP");
}

void* Unit::update_data() const {
  return split_masters()
             ? shard_
             : element(shard_, layout_.update_offset(update_piece_), precision_.storage);
}

ShardSlice Unit::update_slice(std::size_t i) const {
  return layout_.update_slice(i, shard_rank_, update_piece_);
}

void Unit::set_grad_sync(bool on) {
  ctx_.scheduler().quiesce();
  own_grad_sync_ = on;
}

void Unit::set_grad_divide_factor(double factor) {
  ctx_.scheduler().quiesce();
  grad_divide_factor_ = factor;
}

bool Unit::grad_sync() const {
  return own_grad_sync_ && ctx_.grad_sync();
}

void Unit::zero_grads() {
  complete_pending();
  ctx_.memory().take_from_caller();
  grad_shard_is_zero_ = true;
  grad_written_ = false;
  grad_none_.clear();
  accumulated_.reset();
  if (full_grad_) {
    ctx_.memory().zero(full_grad_.data(), full_grad_bytes());
    // The caller's next gradient writes wait for this memset, not for the buffer's first one.
    ctx_.memory().record(grad_ready_.get());
  }
}

void Unit::set_grad_none(std::size_t i, bool none) {
  complete_pending();  // a reduction in flight writes the shard
  if (grad_none(i) == none) return;
  if (grad_none_.empty()) grad_none_.assign(layout_.num_params(), 0);
  if (!none) {  // the shard marked zero: its zeros become this parameter's gradient alone
    if (grad_shard_is_zero_) {
      shard_grad();
      for (std::size_t k = 0; k < layout_.num_params(); ++k)
        grad_none_[k] = layout_.param(k).requires_grad ? 1 : 0;
    }
    grad_none_[i] = 0;
    return;
  }
  grad_none_[i] = 1;
  const ShardSlice s = update_slice(i);
  if (grad_shard_ && s.length) {
    ctx_.memory().take_from_caller();
    const std::size_t es = layout_.element_size();
    ctx_.shard_memory().zero(static_cast<char*>(grad_shard_) + s.shard_offset * es, s.length * es);
    ctx_.shard_memory().handover_to_caller();  // the caller's stream sees the zeros
  }
}

ShardSlice Unit::slice(std::size_t i) const {
  return layout_.slice(i, shard_rank_);
}

}  // namespace fsdp
