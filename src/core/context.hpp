// A context: the caller's communicator duplicated, the process groups derived from it, the
// backend (memory spaces, transport, unsharded storage) every unit of the context shares, and the
// registry of its units. Its other jobs have their own files: the options (context_options.hpp),
// scheduling (scheduler.hpp), the diagnostics (diag/), and what the layers above keep per context
// (context_part.hpp: optimizers, checkpoints).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/memory_accounting.hpp"
#include "core/backend.hpp"
#include "core/context_options.hpp"
#include "core/context_part.hpp"
#include "core/flat_layout.hpp"
#include "core/memory_and_transport.hpp"
#include "core/precision.hpp"
#include "core/process_groups.hpp"
#include "core/scheduler.hpp"
#include "core/step_boundary.hpp"
#include "core/unit_init.hpp"
#include "diag/call_log.hpp"
#include "diag/collective_check.hpp"
#include "diag/trace.hpp"
#include "diag/watchdog.hpp"
#include "memory/memory_space.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/comm_worker.hpp"
#include "runtime/scratch.hpp"

namespace fsdp {

class Unit;

// Where world rank 0 sits, for distributing its values (sync_from_rank0).
struct Rank0Roots {
  int shard_root = -1;      // rank 0's shard-group rank, in its shard group; -1 in the others
  int replicate_root = -1;  // the replicate-group rank of the member of rank 0's shard group
};

class Context {
 public:
  // Collective over `comm`. Every rank passes its options and, when its own arguments were
  // invalid, the error; if any rank has one, or the options differ, every rank throws.
  // `build_backend` builds the memory spaces, transport and storage once the groups exist.
  static std::unique_ptr<Context> create(MPI_Comm comm, const ContextOptions& options,
                                         const std::optional<Error>& local_error,
                                         const BackendFactory& build_backend);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // What a unit may ask for beyond its descriptors.
  struct UnitRequest {
    PrecisionRequest precision;
    std::string name;
    UnitSource source;
    ShardLayout layout = ShardLayout::Flat;
    bool any_ranks = false;  // FSDP_USED_BY_ANY_RANKS
  };
  // Collective over the world group (checks that every rank describes the same unit).
  Unit& create_unit(std::vector<ParamSpec> params, const UnitRequest& request,
                    const std::optional<Error>& local_error);
  void destroy_unit(Unit& unit);
  // Collective over the world group (the tie must agree across ranks).
  // `owner` may be nullptr only together with a local error.
  void tie(Unit& user, const std::string& alias, Unit* owner, std::size_t owner_index,
           const std::optional<Error>& local_error);
  std::vector<Unit*> units() const;

  // What a layer above keeps per context (optimizers, checkpoints), or nullptr; ended with the
  // context at its slot's point of the teardown.
  ContextPart* part(PartSlot slot) const { return parts_[static_cast<int>(slot)].get(); }
  void set_part(PartSlot slot, std::unique_ptr<ContextPart> p) {
    parts_[static_cast<int>(slot)] = std::move(p);
  }

  const ProcessGroups& groups() const { return *groups_; }
  // The lowest world rank on this rank's node (FSDP_RANKS_PER_NODE cuts nodes for tests).
  int node_leader() const { return node_leader_; }
  const ContextOptions& options() const { return options_; }
  int sharding_factor() const { return groups_->shard().size; }
  const Placement& placement() const { return backend_->placement(); }
  // Where unsharded parameters and full gradients live (and partial sums).
  MemorySpace& memory() { return backend_->buffers(); }
  // Where shards, gradient shards and optimizer state live: memory(), or pinned host memory with
  // CPU offload.
  MemorySpace& shard_memory() { return backend_->shards(); }
  // Plain host memory, for what the CPU fills (initialization, checkpoint staging).
  MemorySpace& host_memory() { return backend_->host(); }
  // Before the CPU reads or writes shards (optimizer on the CPU, checkpoints, the caller's
  // fsdp_shard_data): waits for device work that may still use them.
  void before_cpu_touches_shards() { backend_->before_cpu_touches_shards(); }
  // Before the library's own work on shards (optimizer steps, norms, unscaling, checkpoints):
  // unclaimed prefetches released and hpZ's secondaries dropped (their copies would go stale),
  // ordered after the caller's queued work, and after device work when the shards are on the
  // host (CPU offload).
  void before_shard_update() {
    scheduler_->release_unclaimed("before an optimizer step, a norm or a checkpoint");
    drop_secondaries();
    memory().take_from_caller();
    before_cpu_touches_shards();
  }
  Transport& transport() { return backend_->transport(); }
  // Where unsharded parameters live while a unit is unsharded.
  UnshardedStorage& unsharded_storage() { return backend_->unsharded(); }
  // fsdp_abort: the transport is torn down and every later call but fsdp_finalize is refused.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Why, for messages: "fsdp_abort was called" or the watchdog's report.
  std::string abort_reason() const;

  // ---- Debug mode and the watchdog ----
  // Every collective entry point and every wait runs inside one: logged for the watchdog and, in
  // debug mode, a collective call is first compared across the ranks (throws Errc::Mismatch or
  // Errc::Timeout on every rank; a timeout aborts the context).
  CallScope begin_call(const CallInfo& call);
  const CallLog& call_log() const { return call_log_; }
  bool debug_collectives() const { return check_ != nullptr; }
  // Calls to the allocators of every memory space of the context (fsdp_memory_stats).
  uint64_t allocation_calls() { return backend_->allocation_calls(); }
  BufferPool& pool() { return backend_->pool(); }
  // For partial sums that outlive one collective (hybrid: reduce-scatter, then all-reduce).
  Scratch& partial_sums() { return *partial_sums_; }
  MemoryAccounting& accounting() { return accounting_; }
  // Off: reduce_grads keeps full gradients locally (PyTorch's no_sync) until it is turned on.
  // Setting it waits for the work in flight: a reduce started under the old setting completes
  // under it.
  bool grad_sync() const { return grad_sync_; }
  void set_grad_sync(bool on);

  // ---- Asynchronous operations ----
  CommWorker& worker() { return *worker_; }
  Trace& trace() { return *trace_; }
  Scheduler& scheduler() { return *scheduler_; }
  // Units used by any subset of ranks: their windows, update phases and fsdp_step_boundary.
  StepBoundary& step_boundary() { return *step_boundary_; }
  Unit* find_unit(uint64_t id) const;
  // hpZ: every unit's secondary partition dropped (core/secondary_partition.hpp). Local.
  void drop_secondaries();
  // Collective over the shard and replicate groups on first use, then cached.
  const Rank0Roots& rank0_roots();
  std::size_t unsharded_model_bytes() const;
  // Frees cached pool buffers and communication scratch.
  void trim();

 private:
  Context(std::unique_ptr<ProcessGroups> groups, const Topology& topo,
          const ContextOptions& options, const BackendFactory& build_backend);

  ContextOptions options_;
  MemoryAccounting accounting_;
  std::unique_ptr<ProcessGroups> groups_;
  int node_leader_ = 0;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Scratch> partial_sums_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  bool tearing_down_ = false;  // ~Context is freeing the backend (under abort_mutex_)
  std::string abort_reason_;
  void interrupt(const std::string& report);  // the watchdog's error mode
  CallLog call_log_;
  std::unique_ptr<CollectiveCheck> check_;           // debug mode only
  std::map<uint64_t, std::unique_ptr<Unit>> units_;  // by id: creation order, same on every rank
  uint64_t next_unit_id_ = 0;
  bool grad_sync_ = true;
  std::unique_ptr<Trace> trace_;  // declared before worker_: outlives the progress thread
  std::unique_ptr<CommWorker> worker_;
  std::unique_ptr<Watchdog> watchdog_;  // watches ~Context's waits, then stopped
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StepBoundary> step_boundary_;  // its windows outlive the units
  std::optional<Rank0Roots> rank0_roots_;
  std::unique_ptr<ContextPart> parts_[kPartSlots];
};

}  // namespace fsdp
