// The scheduling of a context's communication: the caller's requests (fsdp_request_t), the rate
// limiter (max_unsharded), prefetch along the previous iteration's order, and the phases that
// drive it. Runs on the caller's thread; what it starts runs on the context's progress thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "diag/call_log.hpp"
#include "runtime/comm_worker.hpp"

namespace fsdp {

class Context;
class Unit;

// An asynchronous operation the caller holds a handle to (fsdp_request_t).
struct Request {
  Context* context = nullptr;
  uint64_t id = 0;
  uint64_t unit_id = kNoUnit;
  // nullptr: nothing to wait for (no_sync, or a claimed prefetch whose all-gather was done)
  std::shared_ptr<CommWorker::Task> task;
};

enum class Phase : int { None = 0, Forward = 1, Backward = 2 };

// Prefetch's prediction (paper, "Backward and forward prefetching"): after the caller's unshard of
// unit `id`, its `pos`-th of this phase, the unit that followed it in the previous iteration's
// same phase (`previous`, unit ids in unshard order), while this iteration follows that order;
// nothing otherwise. The planner predicts by the same rule (plan/memory_plan.hpp).
inline std::optional<uint64_t> prefetch_candidate(const std::vector<uint64_t>& previous,
                                                  std::size_t pos, uint64_t id) {
  if (pos + 1 >= previous.size() || previous[pos] != id) return std::nullopt;
  return previous[pos + 1];
}

// What prefetch did since the context was created (fsdp_memory_stats).
struct PrefetchStats {
  uint64_t started = 0;        // all-gathers the library started on its own
  uint64_t used = 0;           // of those, claimed by the caller's unshard
  uint64_t unused = 0;         // of those, released unused (the order changed, or nobody came)
  uint64_t skipped_limit = 0;  // predicted, but max_unsharded units were already held
};

class Scheduler {
 public:
  // `units`: the context's units by id, which the scheduler reads and never changes.
  Scheduler(Context& ctx, const std::map<uint64_t, std::unique_ptr<Unit>>& units)
      : ctx_(ctx), units_(units) {}
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  uint64_t next_sequence() { return ++sequence_; }
  // Waits for everything in flight and applies it: before a synchronous collective on the
  // caller's thread, and before gradient shards are read.
  void quiesce();
  Request& add_request(const Unit& unit, std::shared_ptr<CommWorker::Task> task);
  Request& add_request(std::shared_ptr<CommWorker::Task> task);  // not tied to a unit
  void wait(Request& r);  // waits, applies, forgets the request
  std::vector<Request*> requests() const;
  // Forgets every request (the context is going).
  void clear_requests() { requests_.clear(); }
  // Rate limiter: units unsharded or gathering, plus units whose gradient is being reduced; not
  // units used by any subset of ranks (ranks hold different ones, and the count decides
  // prefetches, which every rank must decide alike).
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
  // An unshard the caller asked for (fsdp_unshard, fsdp_unshard_async): claims the unit's
  // prefetch if it has one (its all-gather, in flight or done), else starts the all-gather (on the
  // caller's thread when synchronous); records it for the next iteration's prefetch and starts
  // this iteration's next prefetch. Returns the all-gather's task (nullptr: nothing to wait for).
  std::shared_ptr<CommWorker::Task> caller_unshard(Unit& u, bool async);
  // Prefetch is a hint: every unit the library unsharded on its own and the caller did not claim
  // (or only `only`) is resharded and its buffer returned. Local; the same on every rank as long
  // as it is called only from calls every rank makes (the same calls made the same prefetches):
  // each phase's start, Context::before_shard_update (optimizer steps, norms, checkpoints) and a
  // unit's destruction. `when` names that point for messages.
  void release_unclaimed(const char* when, Unit* only = nullptr);
  const PrefetchStats& prefetch_stats() const { return stats_; }

 private:
  void prefetch_after(Unit& u);  // records u, starts the next unit's all-gather

  Context& ctx_;
  const std::map<uint64_t, std::unique_ptr<Unit>>& units_;
  uint64_t sequence_ = 0;
  std::map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_request_id_ = 0;
  Phase phase_ = Phase::None;
  bool prefetch_[3] = {false, false, false};
  std::vector<uint64_t> recorded_[3], previous_[3];  // unit ids per phase
  PrefetchStats stats_;
};

}  // namespace fsdp
