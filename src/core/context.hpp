// A context: the caller's communicator duplicated, the process groups derived from it, and the
// transport, memory space and buffer pool that every unit of the context shares.
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

#include "core/backend.hpp"
#include "core/buffer_pool.hpp"
#include "core/call_log.hpp"
#include "core/collective_check.hpp"
#include "core/comm_worker.hpp"
#include "core/error.hpp"
#include "core/flat_layout.hpp"
#include "core/memory_accounting.hpp"
#include "core/placement.hpp"
#include "core/precision.hpp"
#include "core/process_groups.hpp"
#include "core/scratch.hpp"
#include "core/trace.hpp"
#include "core/unit_init.hpp"
#include "core/watchdog.hpp"
#include "memory/memory_space.hpp"
#include "transport/mpi/mpi_transport.hpp"

namespace fsdp {

namespace ckpt {
class CheckpointService;
}
class Unit;
class Optimizer;
class GradScaler;
enum class OptimizerKind : int;
struct HyperParams;

enum class GradReduction : int { Mean = 0, Sum = 1 };

// PyTorch's default for its process groups: long enough for any legitimate collective or
// checkpoint, short of an allocation's length.
constexpr double kDefaultTimeoutSeconds = 1800.0;

struct ContextOptions {
  Strategy strategy = Strategy::FullShard;
  int sharding_factor = 0;  // 0: the strategy's default
  GradReduction grad_reduction = GradReduction::Mean;
  PrecisionRequest precision;  // every unit's, unless the unit asks otherwise
  int max_unsharded = 2;       // rate limiter: units unsharded, gathering or reducing at once
  MpiTransportOptions transport;
  PlacementRequest placement;
  bool debug_collectives = false;             // compare every collective call across ranks first
  double timeout_s = kDefaultTimeoutSeconds;  // the watchdog's; <= 0: none
  bool timeout_abort = false;  // the watchdog aborts the job instead of returning an error

  uint64_t fingerprint() const;
};

// Reads FSDP_REDUCE_SCATTER_ALGORITHM (auto|ring|mpi), FSDP_RING_MIN_BLOCK_BYTES,
// FSDP_RING_PIECE_BYTES, FSDP_TRANSPORT (auto|mpi|shm|nccl), FSDP_DEBUG_COLLECTIVES (0|1),
// FSDP_TIMEOUT (seconds) and FSDP_ON_TIMEOUT (error|abort). Throws InvalidArgument naming the
// variable when a value is not understood.
void apply_environment(ContextOptions& options);

class Context;

// An asynchronous operation the caller holds a handle to (fsdp_request_t).
struct Request {
  static constexpr uint64_t kNoUnit = ~uint64_t{0};  // not a unit's operation (a checkpoint save)
  Context* context = nullptr;
  uint64_t id = 0;
  uint64_t unit_id = kNoUnit;
  std::shared_ptr<CommWorker::Task> task;  // nullptr: nothing was started (no_sync)
};

enum class Phase : int { None = 0, Forward = 1, Backward = 2 };

// Where world rank 0 sits, for distributing its values (sync_from_rank0).
struct Rank0Roots {
  int shard_root = -1;      // rank 0's shard-group rank, in its shard group; -1 in the others
  int replicate_root = -1;  // the replicate-group rank of the member of rank 0's shard group
};

class Context {
 public:
  // Collective over `comm`. Every rank passes its options and, when its own arguments were
  // invalid, the error; if any rank has one, or the options differ, every rank throws.
  static std::unique_ptr<Context> create(MPI_Comm comm, const ContextOptions& options,
                                         const std::optional<Error>& local_error);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // What a unit may ask for beyond its descriptors.
  struct UnitRequest {
    PrecisionRequest precision;
    std::string name;
    UnitSource source;
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

  // Collective over the world group: kind, hyperparameters and units must agree across ranks.
  Optimizer& create_optimizer(OptimizerKind kind, const HyperParams& defaults,
                              std::vector<Unit*> units, const std::optional<Error>& local_error);
  void destroy_optimizer(Optimizer& opt);
  std::vector<Optimizer*> optimizers() const;
  // Collective over the world group: the settings must agree across ranks.
  GradScaler& create_grad_scaler(double init_scale, double growth, double backoff, int interval,
                                 const std::optional<Error>& local_error);
  void destroy_grad_scaler(GradScaler& s);
  std::vector<GradScaler*> grad_scalers() const;

  const ProcessGroups& groups() const { return *groups_; }
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
  // Before the library's own work on shards (optimizer steps, norms, unscaling): ordered after the
  // caller's queued work, and after device work when the shards are on the host (CPU offload).
  void before_shard_update() {
    memory().take_from_caller();
    before_cpu_touches_shards();
  }
  Transport& transport() { return backend_->transport(); }
  // The shared-memory transport's node slots for unsharded parameters, or nullptr.
  shm::NodeSlots* node_slots() { return backend_->node_slots(); }
  shm::ShmTransport* zero_copy() { return backend_->zero_copy(); }
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
  BufferPool& pool() { return *pool_; }
  // For partial sums that outlive one collective (hybrid: reduce-scatter, then all-reduce).
  Scratch& partial_sums() { return *partial_sums_; }
  MemoryAccounting& accounting() { return accounting_; }
  // Off: reduce_grads keeps full gradients locally (PyTorch's no_sync) until it is turned on.
  bool grad_sync() const { return grad_sync_; }
  void set_grad_sync(bool on) { grad_sync_ = on; }

  // ---- Asynchronous operations ----
  CommWorker& worker() { return *worker_; }
  Trace& trace() { return *trace_; }
  uint64_t next_sequence() { return ++sequence_; }
  // Waits for everything in flight and applies it: before a synchronous collective on the
  // caller's thread, and before gradient shards are read.
  void quiesce();
  Unit* find_unit(uint64_t id) const;
  // Collective over the shard and replicate groups on first use, then cached.
  const Rank0Roots& rank0_roots();
  Request& add_request(const Unit& unit, std::shared_ptr<CommWorker::Task> task);
  Request& add_request(std::shared_ptr<CommWorker::Task> task);  // not tied to a unit
  void wait(Request& r);  // waits, applies, forgets the request
  std::vector<Request*> requests() const;
  // Rate limiter: units unsharded or gathering, plus units whose gradient is being reduced.
  int held_units() const;
  // Completes in-flight reduces, oldest first, while held_units() >= max_unsharded: the caller
  // blocks rather than allocating more while memory is about to be freed.
  void make_room();
  // Prefetch (paper, "Backward and forward prefetching"): during a phase, each unshard the
  // caller asks for also starts the all-gather of the unit that followed it in the previous
  // iteration's same phase, when the rate limiter allows.
  void set_prefetch(bool forward, bool backward) {
    prefetch_[1] = forward, prefetch_[2] = backward;
  }
  // Forward starts a new iteration: collective over the world group, which checks that every
  // rank recorded the same unshard order (prefetch would otherwise mismatch collectives).
  void begin_phase(Phase p);
  // An unshard the caller asked for (fsdp_unshard, fsdp_unshard_async): starts the all-gather
  // (on the caller's thread when synchronous; a synchronous call on a unit being prefetched just
  // takes over that all-gather), records it for the next iteration's prefetch and starts this
  // iteration's next prefetch. Returns the all-gather's task.
  std::shared_ptr<CommWorker::Task> caller_unshard(Unit& u, bool async);
  std::size_t unsharded_model_bytes() const;
  // Checkpoints (created on first use).
  ckpt::CheckpointService& checkpoints();
  // Frees cached pool buffers and communication scratch.
  void trim();

 private:
  Context(std::unique_ptr<ProcessGroups> groups, const Topology& topo,
          const ContextOptions& options);

  ContextOptions options_;
  MemoryAccounting accounting_;
  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<BufferPool> pool_;
  std::unique_ptr<Scratch> partial_sums_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;
  void interrupt(const std::string& report);  // the watchdog's error mode
  CallLog call_log_;
  std::unique_ptr<CollectiveCheck> check_;           // debug mode only
  std::map<uint64_t, std::unique_ptr<Unit>> units_;  // by id: creation order, same on every rank
  uint64_t next_unit_id_ = 0;
  std::map<uint64_t, std::unique_ptr<Optimizer>> optimizers_;
  uint64_t next_optimizer_id_ = 0;
  std::map<uint64_t, std::unique_ptr<GradScaler>> scalers_;
  uint64_t next_scaler_id_ = 0;
  bool grad_sync_ = true;
  std::unique_ptr<Trace> trace_;  // declared before worker_: outlives the progress thread
  std::unique_ptr<CommWorker> worker_;
  std::unique_ptr<Watchdog> watchdog_;  // last: stopped first
  uint64_t sequence_ = 0;
  std::map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_request_id_ = 0;
  Phase phase_ = Phase::None;
  bool prefetch_[3] = {false, false, false};
  std::vector<uint64_t> recorded_[3], previous_[3];  // unit ids per phase

  void prefetch_after(Unit& u);  // records u, starts the next unit's all-gather
  std::optional<Rank0Roots> rank0_roots_;
  std::unique_ptr<ckpt::CheckpointService> checkpoints_;
};

}  // namespace fsdp
