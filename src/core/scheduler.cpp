#include "core/scheduler.hpp"

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "base/id_order.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "diag/trace.hpp"

namespace fsdp {

void Scheduler::quiesce() {
  ctx_.worker().drain();
  for (auto& [id, u] : units_) u->complete_pending();
}

Request& Scheduler::add_request(const Unit& unit, std::shared_ptr<CommWorker::Task> task) {
  Request& r = add_request(std::move(task));
  r.unit_id = unit.id();
  return r;
}

Request& Scheduler::add_request(std::shared_ptr<CommWorker::Task> task) {
  auto r = std::make_unique<Request>();
  r->context = &ctx_;
  r->id = next_request_id_++;
  r->task = std::move(task);
  Request& ref = *r;
  requests_.emplace(ref.id, std::move(r));
  return ref;
}

void Scheduler::wait(Request& r) {
  const uint64_t id = r.id;
  std::shared_ptr<CommWorker::Task> task = r.task;
  Unit* u = ctx_.find_unit(r.unit_id);
  requests_.erase(id);  // forgotten whatever the outcome
  if (!task) return;
  if (u && u->pending_task() == task)
    u->complete_pending();
  else
    task->wait();  // already applied by an implicit wait; rethrows its error if it had one
}

std::vector<Request*> Scheduler::requests() const {
  return in_id_order(requests_);
}

int Scheduler::held_units() const {
  int n = 0;
  for (const auto& [id, u] : units_)
    n += !u->used_by_any_ranks() && (u->is_unsharded() || u->pending() == Unit::Pending::Reduce);
  return n;
}

void Scheduler::make_room() {
  while (held_units() >= ctx_.options().max_unsharded) {
    Unit* oldest = nullptr;
    for (const auto& [id, u] : units_)
      if (u->pending() == Unit::Pending::Reduce &&
          (!oldest || u->pending_sequence() < oldest->pending_sequence()))
        oldest = u.get();
    if (!oldest) return;
    oldest->complete_pending();
  }
}

void Scheduler::begin_phase(Phase p) {
  // What the last phase prefetched and never used would otherwise stay unsharded across the
  // phase: released on every rank alike (the same calls made the same prefetches).
  if (p == Phase::Backward) {
    release_unclaimed("at fsdp_begin_backward");
  } else {
    // A release that fails on some ranks (a prefetch's all-gather failed there) joins the
    // agreement below, so that every rank fails instead of some waiting in it.
    std::optional<Error> failed = attempt([&] { release_unclaimed("at fsdp_begin_forward"); });
    if (!failed) failed = attempt([&] { quiesce(); });
    Fingerprint f;
    for (int k = 1; k <= 2; ++k) {
      previous_[k] = std::move(recorded_[k]);
      recorded_[k].clear();
      f.add(static_cast<uint64_t>(previous_[k].size()));
      for (uint64_t id : previous_[k]) f.add(id);
    }
    agree(ctx_.groups().world(), "unshard orders of the previous iteration (prefetch)", f.value(),
          failed);
  }
  phase_ = p;
}

std::shared_ptr<CommWorker::Task> Scheduler::caller_unshard(Unit& u, bool async) {
  std::shared_ptr<CommWorker::Task> task;
  if (u.prefetched()) {  // the caller claims it: its all-gather, in flight or done
    u.claim_prefetch();
    ++stats_.used;
    if (u.pending() == Unit::Pending::Unshard) task = u.pending_task();
  } else if (!async && u.pending() == Unit::Pending::Unshard) {
    task = u.pending_task();
  } else {
    task = u.unshard_async(/*now=*/!async);
  }
  // A unit used by any subset of ranks is neither recorded nor followed by a prefetch: the
  // ranks' orders would differ.
  if (!u.used_by_any_ranks()) prefetch_after(u);
  return task;
}

void Scheduler::release_unclaimed(const char* when, Unit* only) {
  auto release = [&](Unit& u) {
    if (!u.prefetched()) return;
    ++stats_.unused;
    u.release_prefetch(when);
  };
  if (only) return release(*only);
  for (const auto& [id, u] : units_) release(*u);
}

void Scheduler::prefetch_after(Unit& u) {
  if (phase_ == Phase::None) return;
  const int k = static_cast<int>(phase_);
  std::vector<uint64_t>& rec = recorded_[k];
  rec.push_back(u.id());
  const std::vector<uint64_t>& prev = previous_[k];
  const std::size_t pos = rec.size() - 1;
  // Only while this iteration follows the previous one's order; the same decision on every rank.
  const std::optional<uint64_t> candidate = prefetch_candidate(prev, pos, u.id());
  if (!prefetch_[k] || !candidate) return;
  Unit* next = ctx_.find_unit(*candidate);
  if (!next || next->is_unsharded()) return;
  make_room();
  if (held_units() >= ctx_.options().max_unsharded) {  // held by the caller: skip, do not block
    ++stats_.skipped_limit;
    TraceSpan span(ctx_.trace(), "prefetch_skipped_limit", next->trace_name(), 0);
    return;
  }
  next->complete_pending();  // a reduce in flight: its errors are its own
  try {
    next->unshard_async();
  } catch (const Error& e) {  // not the caller's unshard: say whose it was
    if (next->is_unsharded()) next->mark_prefetched();  // held: released like any prefetch
    throw Error(e.code(), "the prefetch of " + next->label() + " that libfsdp started after " +
                              u.label() + " (fsdp_set_prefetch) failed: " + e.what());
  }
  next->mark_prefetched();
  ++stats_.started;
}

}  // namespace fsdp
