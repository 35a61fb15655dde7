// A unit: one flat parameter (paper, section "FlatParameter"). Holds this rank's parameter shard
// (the master copy, in the storage dtype) and gradient shard; holds its unsharded parameters
// (param dtype) between unshard and reshard in the storage the backend chose
// (runtime/unsharded_storage.hpp: a pool buffer, or the node's shared copy), and borrows a full
// gradient buffer (param dtype, trainable section only) from the pool between the first grad_data
// and the reduce that communicates it. A unit whose storage keeps shards in place ("zero-copy
// storage": FSDP_TRANSPORT_SHM_ZERO_COPY, shard group on one node, no conversion, this rank's
// blocks contiguous) has its shard at its place in that copy for life, and its unshard moves
// nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/store.hpp"
#include "core/flat_layout.hpp"
#include "core/precision.hpp"
#include "core/secondary_partition.hpp"
#include "core/unit_bytes.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/comm_worker.hpp"
#include "runtime/unsharded_storage.hpp"

namespace fsdp {

class Context;
class ShardWindow;

// A parameter of another unit (the owner) that this unit uses too, under an alias: an embedding
// reused as the output head. It is stored, sharded, reduced and updated once, in the owner; both
// uses read the owner's unsharded copy and add into the owner's full gradient, so their
// gradients are summed.
struct Tie {
  std::string alias;
  uint64_t owner_id = 0;
  std::size_t owner_index = 0;
};

// The rules of a tie that need no unit, only names (the planner checks a model by them too):
// `alias` is neither a parameter of the user (`user_params`) nor one of its aliases, and the
// owner uses no ties itself (a tie names the unit that stores the parameter). Throws
// InvalidArgument naming alias or owner; `user` and `owner` label the units for the message.
void check_tie_names(const std::vector<ParamSpec>& user_params,
                     const std::vector<std::string>& user_aliases, const std::string& user,
                     const std::string& alias, bool owner_uses_ties, const std::string& owner);

class Unit {
 public:
  // Not collective: Context::create_unit does the cross-rank check first. The shard is zero.
  // `any_ranks`: any subset of ranks may use it (FSDP_USED_BY_ANY_RANKS; core/step_boundary.hpp):
  // its shard lives in a window the others read (core/shard_window.hpp; collective over the
  // shard group here).
  Unit(Context& ctx, uint64_t id, FlatLayout layout, const Precision& precision, std::string name,
       bool any_ranks = false);
  ~Unit();
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  std::string label() const;  // "unit 3" or "unit 3 ('encoder.0')" for messages
  // Built once: spans on the hot path take it by reference, allocating nothing when not tracing.
  const std::string& trace_name() const { return trace_name_; }
  const FlatLayout& layout() const { return layout_; }
  const Precision& precision() const { return precision_; }
  Context& context() const { return ctx_; }
  int shard_rank() const { return shard_rank_; }
  // Any subset of ranks may use it in a step: one-sided unshards, gradients reduced at the step
  // boundary (core/step_boundary.hpp).
  bool used_by_any_ranks() const { return window_ != nullptr; }
  // Such a unit holds a gradient the next step boundary reduces.
  bool deferred_gradient() const;
  // The step boundary's reduction of such a unit, on every rank of its groups: this rank's
  // gradient, or zeros.
  void reduce_at_boundary();
  // HFSDP: which piece of the trainable block this rank updates (its replicate rank); else 0.
  int update_piece() const { return update_piece_; }
  // Whether unsharded parameters are held, by the caller or by a prefetch nobody claimed yet.
  bool is_unsharded() const { return unsharded_.held(); }
  // Prefetch is a hint the caller never sees: a unit the library unsharded on its own is
  // "prefetched" until the caller's own unshard claims it (and it is then the caller's, as if the
  // caller had unsharded it), or the scheduler releases it unused (Scheduler::release_unclaimed).
  bool prefetched() const { return prefetched_; }
  // The caller unsharded the unit (and has not resharded it): what every rule about an unsharded
  // unit means.
  bool held_by_caller() const { return is_unsharded() && !prefetched_; }
  // After unshard_async for a prefetch: the unit is the library's, and its all-gather's errors are
  // reported as the prefetch's, even after a claim.
  void mark_prefetched() { prefetched_ = gathered_by_prefetch_ = true; }
  void claim_prefetch() { prefetched_ = false; }
  // Waits for the unclaimed prefetch's all-gather and returns its buffer (local). An error of
  // that all-gather is reported as the prefetch's, naming `when`.
  void release_prefetch(const char* when);
  // A gradient was written through grad_data since the last reduction took it (or zero_grads
  // discarded it): a step now would miss it.
  bool grad_unreduced() const { return grad_written_; }
  // Whether the shard lives in the node's unsharded copy (see above).
  bool zero_copy() const { return unsharded_.in_place(); }
  // Gradient sync for this unit alone (FSDP2's per-module set_requires_gradient_sync); it
  // communicates when both this and the context's setting (fsdp_set_grad_sync) are on. Waits
  // for the context's work in flight first: a reduce started under the old setting completes
  // under it.
  void set_grad_sync(bool on);
  bool grad_sync() const;
  // What the reduced gradient is divided by (fsdp_unit_set_grad_divide_factor): 0 is the
  // context's rule. Waits for the context's work in flight first, as set_grad_sync.
  void set_grad_divide_factor(double factor);
  // Ties this unit uses (alias index = num_params() + position), and units tied to this one.
  const std::vector<Tie>& ties() const { return ties_; }
  void add_tie(Tie t) { ties_.push_back(std::move(t)); }
  void add_tied_user(uint64_t id) { tied_users_.push_back(id); }
  void remove_tied_user(uint64_t id);

  // Throws InvalidArgument (naming the argument: owner, alias) when this unit cannot use
  // `owner`'s parameter under `alias`: another context, itself, an alias already used, or an
  // owner that uses ties itself (a tie names the unit that stores the parameter).
  void check_tie(const std::string& alias, const Unit& owner) const;
  // Why the unit cannot be destroyed now (an operation in flight, units tied to it, optimizers
  // using it); nothing when it can.
  std::optional<Error> destroy_refusal() const;

  // Optimizers using the unit: it cannot be destroyed while any does.
  void add_user() { ++users_; }
  void remove_user() { --users_; }

  // What the progress thread is doing for the unit, if anything.
  enum class Pending { None, Unshard, Reduce };
  Pending pending() const { return pending_; }
  const std::shared_ptr<CommWorker::Task>& pending_task() const { return pending_task_; }
  uint64_t pending_sequence() const { return pending_sequence_; }
  // Waits for the pending operation and applies its result; rethrows its error (a failed
  // all-gather leaves the unit sharded). No-op when nothing is pending.
  void complete_pending();

  // Starts the all-gather on the progress thread (collective over the shard group), after the
  // rate limiter made room; with `now`, runs it on the caller's thread after what is queued (a
  // synchronous call).
  std::shared_ptr<CommWorker::Task> unshard_async(bool now = false);
  void reshard();  // waits for a pending unshard first
  void* param_data(std::size_t i);
  void* grad_data(std::size_t i);
  // Collective over the shard and replicate groups, unless gradient sync is off in the context
  // (no_sync), when the full gradient is kept for the next micro-batch to add to (and nullptr is
  // returned: nothing to wait for).
  std::shared_ptr<CommWorker::Task> reduce_grads_async(bool now = false);
  void reduce_grads();
  // Why this rank cannot start the caller's unshard (`async`: fsdp_unshard_async) or reduce now,
  // found without communicating; nothing when it can. Debug mode sends it along with the call,
  // so that every rank fails instead of the others entering a collective this rank never joins.
  std::optional<Error> unshard_refusal(bool async) const;
  std::optional<Error> reduce_refusal() const;
  void zero_grads();
  // PyTorch's p.grad = None, per trainable parameter: true from the unit's creation and after
  // zero_grads (the gradient shard marked zero, as zero_grad(set_to_none=True) leaves every
  // grad None) until a reduction with gradient sync or shard_grad() gives the gradient (zeros
  // included); set_grad_none(i, true) marks one parameter alone (its part of the shard is
  // zeroed) until the next reduction or zero_grads. The library's optimizers skip a parameter
  // whose gradient is None (a frozen parameter's always is). Local: every rank of the unit's
  // groups marks alike (the caller agrees on it). `i` is a trainable parameter.
  void set_grad_none(std::size_t i, bool none);
  bool grad_none(std::size_t i) const {
    return grad_shard_is_zero_ || !layout_.param(i).requires_grad ||
           (!grad_none_.empty() && grad_none_[i] != 0);
  }

  // The shard, bytes().shard() bytes; its layout is fsdp.h's (the storage dtype, each section's
  // block) unless the masters are split (UnitBytes::split_masters), which the caller's view of it
  // refuses (refuse_split_shard).
  void* shard_data() const { return shard_; }
  bool split_masters() const { return bytes().split_masters(); }
  // Where parameter i's master values are: a slice of the master copy (storage dtype elements
  // from shard_data(), UnitBytes::master_numel() of them), and whether the rank holds them as one
  // of the whole job (split masters: its update range) rather than one of its shard group.
  ShardSlice master_slice(std::size_t i) const;
  bool master_in_piece(std::size_t i) const {
    return split_masters() && layout_.param(i).requires_grad;
  }
  // Sets the shard from `shard`, this rank's shard in fsdp.h's layout (storage dtype, in shard
  // memory): a copy, or with split masters this rank's master piece and frozen block out of it
  // and its trainable block converted. Local.
  void install_shard(const void* shard);
  // Throws Unsupported naming `call` when the masters are split (see shard_data()).
  void refuse_split_shard(const char* call) const;
  // hpZ: the secondary partition goes unused (the shard may change: fsdp_shard_data, the
  // library's optimizer step, norm or checkpoint); one an unshard in flight reads goes when that
  // unshard completes. Local.
  void drop_secondary() {
    if (pending_ != Pending::Unshard) secondary_.drop();
  }
  bool has_secondary() const { return secondary_.held(); }
  void* shard_grad();  // the caller's view: zeros are written here if the shard is marked zero
  // For the library's own optimizers and norms: nullptr when no gradient was ever reduced; else
  // the shard, and `is_zero` says whether its memory is meaningful.
  void* grad_shard_if_any(bool* is_zero) const {
    *is_zero = grad_shard_is_zero_;
    return grad_shard_;
  }
  ShardSlice slice(std::size_t i) const;
  // Parameter i's part of this rank's update range (offsets into the gradient shard).
  ShardSlice update_slice(std::size_t i) const;
  // The master elements of this rank's update range (what the gradient shard's first element
  // updates): in the shard, or the master piece when split.
  void* update_data() const;
  // Throws Unsupported naming `what` (the caller's view of the gradient shard or of optimizer
  // state) under HFSDP, where they cover this rank's piece alone, which only the library's
  // optimizers update.
  void refuse_piece_view(const char* what) const;
  // HFSDP, after this rank's update range was updated (collective over the replicate group): the
  // all-gather across replicas that brings every piece of the trainable block up to date, after
  // this rank's updated master piece was rounded into its piece of the block when split.
  void gather_update_pieces();

  UnitBytes bytes() const { return {layout_, precision_}; }
  std::size_t shard_bytes() const { return bytes().shard(); }
  std::size_t grad_shard_bytes() const { return bytes().grad_shard(); }
  std::size_t unsharded_bytes() const { return bytes().unsharded(); }
  std::size_t full_grad_bytes() const { return bytes().full_grad(); }

 private:
  char* element(void* base, std::size_t i, DType t) const;
  char* block(SectionKind k) const;  // this rank's block of section k (UnitBytes::block_offset)
  void* grad_shard_storage();        // allocated, contents meaningful only if !grad_shard_is_zero_
  // Throws State when a unit using one of this unit's parameters is still unsharded: `doing` can
  // then not happen yet (resharding would pull the parameter from under it, reducing would miss
  // its gradient).
  void check_tied_users_done(const char* doing) const;
  // Run on the progress thread: the collectives only (buffers are prepared by the caller).
  void gather_sections(const Located& full);
  // The dim-0 layout's all-gather and the reduce-scatter's input (see the .cpp).
  void gather_pieces(const Located& full);
  void place_for_reduce(void* out, const void* in, DType from);
  // This rank's block of each section, rounded to param_dtype, into `full` (mixed precision, and
  // CPU offload where the shard is in host memory the transport does not take).
  void copy_own_blocks(void* full);
  // Whether every rank's shard is exactly its block of the unsharded buffer, so that a storage
  // may keep it in place (the same answer on every rank).
  bool shard_is_a_block() const;
  void release_unsharded();
  // A zeroed full gradient buffer, unless one is held (what grad_data writes into).
  void acquire_full_grad();
  // Where its unsharded parameters live: the backend's storage, or for a unit used by any subset
  // of ranks a private pool buffer (no collective order to follow).
  UnshardedStorage& storage() const;
  // The unshard of a unit used by any subset of ranks: every rank's blocks read from the shard
  // window (one-sided), converted and placed as the all-gather would. Local.
  void unshard_one_sided();
  // Debug mode: checks the node copy this rank holds (false when a node peer wrote into it), once
  // per hold: before a reduce lets peers write, else at reshard.
  void check_node_copy_once();
  // Whether unshard_async writes this rank's block of the unsharded buffer itself (a conversion,
  // or a copy out of offloaded host memory) so the all-gather runs in place.
  bool own_block_copied() const;
  void reduce_into(const Located& full, DType t, void* out, Store store);
  bool accumulates_wider() const;
  void fold_into_accumulated();  // full_grad_ added into accumulated_ (in reduce_dtype)
  std::shared_ptr<CommWorker::Task> track(Pending kind, std::shared_ptr<CommWorker::Task> t);

  Context& ctx_;
  const uint64_t id_;
  const FlatLayout layout_;
  const Precision precision_;
  const std::string name_;
  const std::string trace_name_;  // name_, or "unit <id>"
  const int shard_rank_;
  const int update_piece_;
  void* shard_ = nullptr;
  ShardWindow* window_ = nullptr;  // used by any subset of ranks: the window shard_ lives in
  bool at_boundary_ = false;       // reduce_at_boundary is reducing: communicate
  void* grad_shard_ = nullptr;     // allocated on first use: frozen or inference units never pay
  // The gradient shard is zero without its memory saying so (fresh, or after zero_grads, like
  // PyTorch's set_to_none): the next reduce assigns instead of reading and adding, which saves
  // two passes over the shard per step (the zeroing and the read).
  bool grad_shard_is_zero_ = true;
  bool prefetched_ = false;            // see prefetched()
  bool gathered_by_prefetch_ = false;  // the pending all-gather was a prefetch's
  bool grad_written_ = false;          // see grad_unreduced()
  bool own_grad_sync_ = true;          // see grad_sync()
  double grad_divide_factor_ = 0.0;    // see set_grad_divide_factor(); 0: the context's rule
  std::vector<uint8_t> grad_none_;     // see set_grad_none(); empty: no parameter is marked
  int users_ = 0;
  std::vector<Tie> ties_;
  std::vector<uint64_t> tied_users_;
  // The unsharded parameters: held from the unshard's start to the reshard (the all-gather's
  // output), or for life when the storage keeps the shard in place.
  UnshardedStorage::Claim unsharded_;
  // Debug mode, while unsharded: the node copy's check, once made (at the first reduce of the
  // hold, after which node peers may write their shards; else at reshard).
  std::optional<bool> copy_intact_;
  Lease gather_scratch_;  // the dim-0 layout's all-gather, while an unshard is pending
  Lease full_grad_;       // the caller's full gradient while one is being written
  Lease reduce_copy_;     // the full gradient in reduce_dtype while it is reduced
  // Gradient sync off (no_sync) with a reduce_dtype wider than param_dtype (bfloat16 compute,
  // float32 reduction): each micro-batch's full gradient is added here, in reduce_dtype, at its
  // reduce, so micro-batches accumulate in float32 as FSDP2's do; the synchronizing reduce adds
  // the last one and communicates the sum.
  Lease accumulated_;
  // Device memory: recorded after the all-gather and after a fresh gradient buffer is zeroed, so
  // the caller's stream waits for this unit's work only, not for a prefetch queued behind it.
  std::unique_ptr<StreamMark> gathered_, grad_ready_;
  Pending pending_ = Pending::None;
  std::shared_ptr<CommWorker::Task> pending_task_;
  uint64_t pending_sequence_ = 0;
  // hpZ: kept at the reshard of a hold that wrote no gradient through grad_data (a forward use),
  // read and dropped by the next unshard (core/secondary_partition.hpp).
  SecondaryPartition secondary_;
  bool hold_wrote_grad_ = false;
};

}  // namespace fsdp
