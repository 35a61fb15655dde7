#include "core/step_boundary.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "base/error.hpp"
#include "base/fingerprint.hpp"
#include "base/mpi_check.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "diag/trace.hpp"

namespace fsdp {

StepBoundary::~StepBoundary() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_key_ != MPI_KEYVAL_INVALID && !finalized) {
    MPI_Comm_delete_attr(MPI_COMM_SELF, finalize_key_);  // releases, as at MPI_Finalize
    MPI_Comm_free_keyval(&finalize_key_);
  }
  release_mpi();
}

void StepBoundary::release_mpi() {
  if (released_) return;
  released_ = true;
  if (progress_.joinable()) {
    stop_.store(true, std::memory_order_release);
    progress_.join();
  }
  // In unit order: every rank frees the same windows in the same order.
  for (auto& [id, w] : windows_) w->release();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!active() || !freeable_ || finalized) return;
  if (phases_rma_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(phases_rma_);
    MPI_Win_free(&phases_rma_);
    MPI_Comm_free(&progress_comm_);
  }
  MPI_Win_unlock_all(phases_shared_);
  MPI_Win_free(&phases_shared_);
  MPI_Comm_free(&world_node_);
  MPI_Comm_free(&peers_.node);
  MPI_Comm_free(&comm_);
}

void StepBoundary::abandon() {
  freeable_ = false;
  for (auto& [id, w] : windows_) w->abandon();
}

namespace {

int release_at_finalize(MPI_Comm, int, void* boundary, void*) {
  static_cast<StepBoundary*>(boundary)->release_mpi();
  return MPI_SUCCESS;
}

// For each rank of `comm`, its rank in the split of `comm` by node (key: rank in `comm`) when it
// shares this rank's node, else -1. Collective over `comm`.
std::vector<int> node_indices(MPI_Comm comm, int leader, int* distinct_nodes) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> leaders(static_cast<std::size_t>(size));
  mpi_check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm), "MPI_Allgather");
  std::vector<int> index(leaders.size(), -1);
  int next = 0;
  for (std::size_t r = 0; r < leaders.size(); ++r)
    if (leaders[r] == leader) index[r] = next++;
  std::vector<int> sorted = leaders;
  std::sort(sorted.begin(), sorted.end());
  *distinct_nodes = static_cast<int>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
  return index;
}

}  // namespace

void StepBoundary::activate() {
  const ProcessGroups& groups = ctx_.groups();
  const Group& world = groups.world();
  const Group& shard = groups.shard();
  const int leader = ctx_.node_leader();
  mpi_check(MPI_Comm_dup(world.comm, &comm_), "MPI_Comm_dup");
  // The counters of closed update phases, one per rank, in node shared memory.
  int world_nodes = 1;
  const std::vector<int> world_index = node_indices(world.comm, leader, &world_nodes);
  mpi_check(MPI_Comm_split(world.comm, leader, world.rank, &world_node_), "MPI_Comm_split");
  void* base = nullptr;
  mpi_check(MPI_Win_allocate_shared(sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, world_node_,
                                    &base, &phases_shared_),
            "MPI_Win_allocate_shared (the update phases of units used by any subset of ranks)");
  mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, phases_shared_), "MPI_Win_lock_all");
  published_ = static_cast<int64_t*>(base);
  __atomic_store_n(published_, int64_t{0}, __ATOMIC_RELEASE);
  node_phases_.assign(world_index.size(), nullptr);
  for (std::size_t r = 0; r < world_index.size(); ++r) {
    if (world_index[r] < 0) continue;
    MPI_Aint size = 0;
    int unit = 1;
    void* p = nullptr;
    mpi_check(MPI_Win_shared_query(phases_shared_, world_index[r], &size, &unit, &p),
              "MPI_Win_shared_query");
    node_phases_[r] = static_cast<const int64_t*>(p);
  }
  known_.assign(world_index.size(), 0);
  // The shard group: who shares the node, and the world rank of each member.
  int shard_nodes = 1;
  peers_.shard = shard.comm;
  peers_.node_index = node_indices(shard.comm, leader, &shard_nodes);
  mpi_check(MPI_Comm_split(shard.comm, leader, shard.rank, &peers_.node), "MPI_Comm_split");
  int spans = shard_nodes > 1 ? 1 : 0;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &spans, 1, MPI_INT, MPI_MAX, world.comm), "MPI_Allreduce");
  peers_.spans_nodes = spans != 0;
  std::vector<int> ranks(static_cast<std::size_t>(shard.size));
  for (int r = 0; r < shard.size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  shard_world_.assign(ranks.size(), 0);
  MPI_Group sg, wg;
  MPI_Comm_group(shard.comm, &sg);
  MPI_Comm_group(world.comm, &wg);
  MPI_Group_translate_ranks(sg, shard.size, ranks.data(), wg, shard_world_.data());
  MPI_Group_free(&sg);
  MPI_Group_free(&wg);
  if (peers_.spans_nodes) {
    // Across nodes: gets through MPI, which needs this rank's MPI driven while it computes.
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE)
      fail(Errc::Unsupported,
           "options->used_by = FSDP_USED_BY_ANY_RANKS with shard groups that span nodes needs "
           "MPI_THREAD_MULTIPLE (a progress thread serves the other ranks' one-sided reads); "
           "initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)");
    mpi_check(MPI_Win_create(published_, sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL,
                             world.comm, &phases_rma_),
              "MPI_Win_create");
    mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, phases_rma_), "MPI_Win_lock_all");
    mpi_check(MPI_Comm_dup(world.comm, &progress_comm_), "MPI_Comm_dup");
    progress_ = std::thread([this] {
      while (!stop_.load(std::memory_order_acquire)) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, progress_comm_, &flag, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  // MPI_Finalize before the context's teardown (a framework that never finalizes its context)
  // must find neither the thread inside MPI nor windows still registered.
  mpi_check(
      MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, release_at_finalize, &finalize_key_, nullptr),
      "MPI_Comm_create_keyval");
  mpi_check(MPI_Comm_set_attr(MPI_COMM_SELF, finalize_key_, this), "MPI_Comm_set_attr");
  mpi_check(MPI_Barrier(world.comm), "MPI_Barrier");  // every rank's counter is set
}

ShardWindow& StepBoundary::add_window(uint64_t unit_id, std::size_t bytes) {
  if (!active()) activate();
  auto w = std::make_unique<ShardWindow>(peers_, bytes);
  ShardWindow& ref = *w;
  windows_[unit_id] = std::move(w);
  return ref;
}

void StepBoundary::initialized(uint64_t unit_id) {
  windows_.at(unit_id)->sync();
  mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
}

UnshardedStorage& StepBoundary::private_storage() {
  if (!storage_) storage_ = std::make_unique<PooledStorage>(ctx_.pool());
  return *storage_;
}

void StepBoundary::at_call(const CallInfo& call) {
  if (!active()) return;
  if (call.collective) ++collectives_;
  switch (call.phase) {
    case CallInfo::Phase::Continues: return;
    case CallInfo::Phase::Restarts:  // every rank alike: the phases stay numbered alike
      begin_collective_update();
      return;
    case CallInfo::Phase::Ends:
      if (updating_) {
        ended_by_ = call.call;
        end_update();
      }
      return;
  }
}

void StepBoundary::end_update() {
  if (!updating_) return;
  for (auto& [id, w] : windows_) w->sync();  // the shards' stores first
  __atomic_store_n(published_, opened_, __ATOMIC_RELEASE);
  mpi_check(MPI_Win_sync(phases_shared_), "MPI_Win_sync");
  if (phases_rma_ != MPI_WIN_NULL) mpi_check(MPI_Win_sync(phases_rma_), "MPI_Win_sync");
  updating_ = false;
}

void StepBoundary::require_update(const std::string& what) const {
  if (!active() || updating_) return;
  fail(Errc::StepBoundary,
       what +
           " is used by any subset of ranks (FSDP_USED_BY_ANY_RANKS): its shards change only in "
           "the update phase that fsdp_step_boundary opens" +
           (boundaries_ == 0 || ended_by_.empty()
                ? std::string("; call fsdp_step_boundary once per step, before the update")
                : "; this rank's phase was ended by " + ended_by_ +
                      ": update before any call other than fsdp_clip_grad_norm, "
                      "fsdp_grad_scaler_unscale/_step and fsdp_optimizer_step") +
           ". Nothing was updated");
}

int64_t StepBoundary::peer_phases(int world_rank) {
  if (const int64_t* p = node_phases_[static_cast<std::size_t>(world_rank)])
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
  int64_t v = 0;
  mpi_check(MPI_Fetch_and_op(nullptr, &v, MPI_INT64_T, world_rank, 0, MPI_NO_OP, phases_rma_),
            "MPI_Fetch_and_op (a peer's parameter updates)");
  mpi_check(MPI_Win_flush(world_rank, phases_rma_), "MPI_Win_flush");
  return v;
}

void StepBoundary::wait_for_updates(const std::vector<int>& world_ranks) {
  for (const int w : world_ranks) {
    int64_t& seen = known_[static_cast<std::size_t>(w)];
    auto pause = std::chrono::microseconds(10);
    while (seen < opened_) {
      seen = peer_phases(w);
      if (seen >= opened_) break;
      if (ctx_.aborted()) fail(Errc::Aborted, "interrupted: " + ctx_.abort_reason());
      std::this_thread::sleep_for(pause);  // the peer is still updating: let it have the core
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

void StepBoundary::begin_collective_update() {
  if (!active()) return;
  end_update();
  ++opened_;
  updating_ = true;
}

void StepBoundary::boundary() {
  if (!active()) return;
  end_update();
  ctx_.scheduler().quiesce();
  std::vector<Unit*> units;
  Fingerprint f;
  for (Unit* u : ctx_.units())
    if (u->used_by_any_ranks()) {
      units.push_back(u);
      f.add(u->id());
    }
  // Every rank made the same collective calls since the last boundary, and has the same units:
  // else one missed or doubled the boundary (or a collective), and nothing is reduced.
  const auto calls = static_cast<int64_t>(collectives_);
  const auto n = static_cast<int64_t>(units.size());
  const auto fp = static_cast<int64_t>(f.value() >> 1);
  int64_t head[6] = {calls, -calls, n, -n, fp, -fp};
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, head, 6, MPI_INT64_T, MPI_MAX, comm_),
            "MPI_Allreduce (fsdp_step_boundary)");
  collectives_ = 0;
  if (head[0] != -head[1])
    fail(Errc::StepBoundary,
         "fsdp_step_boundary: the ranks made different numbers of collective calls since the "
         "last boundary (from " +
             std::to_string(-head[1]) + " to " + std::to_string(head[0]) +
             ", this boundary included): a rank missed or doubled fsdp_step_boundary, or made a "
             "collective call the others did not. Nothing was reduced; run with "
             "FSDP_DEBUG_COLLECTIVES=1 to find the call");
  if (head[2] != -head[3] || head[4] != -head[5])
    fail(Errc::StepBoundary,
         "fsdp_step_boundary: the ranks have different units used by any subset of ranks (one "
         "destroyed a unit the others still have). Nothing was reduced");
  std::vector<uint8_t> flags(units.size(), 0);
  for (std::size_t i = 0; i < units.size(); ++i) flags[i] = units[i]->deferred_gradient() ? 1 : 0;
  if (!flags.empty())
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, flags.data(), static_cast<int>(flags.size()), MPI_UINT8_T,
                            MPI_MAX, comm_),
              "MPI_Allreduce (fsdp_step_boundary)");
  {
    TraceSpan span(ctx_.trace(), "step_boundary", "", 0);
    for (std::size_t i = 0; i < units.size(); ++i)
      if (flags[i]) units[i]->reduce_at_boundary();
  }
  ++boundaries_;
  ++opened_;
  updating_ = true;
  ended_by_.clear();
}

}  // namespace fsdp
