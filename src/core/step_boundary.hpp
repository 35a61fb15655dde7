// Units any subset of ranks may use in a step (FSDP_USED_BY_ANY_RANKS), and the step boundary
// that makes them safe (fsdp_step_boundary; doc/concepts.md, "Units used by any subset of ranks").
//
// Reads: a rank unshards such a unit by reading the other ranks' shards one-sidedly from their
// windows (core/shard_window.hpp), so the others need not take part.
// Writes: the owners of those shards change them only in an update phase. A rank opens one at
// each boundary (a checkpoint load, a norm and the grad scaler restart it), collective calls every
// rank makes in the same order, so the phases are numbered alike everywhere; it closes it at its
// next call that is not of the phase (an unshard, fsdp_begin_forward, a collective of the
// caller's...) and then publishes how many it closed, in a one-integer counter of its own. A
// reader whose rank has opened n phases reads a peer's shard once that peer published n: its
// update of phase n is then complete and visible. A reader may wait, never deadlock: each rank
// closes its phase before its calls that could wait for another rank (but the HFSDP optimizer
// step, doc/concepts.md).
// Gradients: such a unit's fsdp_reduce_grads keeps the full gradient; the boundary agrees in one
// all-reduce on which units carry one on some rank and reduce-scatters those, ranks without one
// adding zeros, in unit order: the collective path, with the same sums and the same bits as if
// every rank had reduced.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/shard_window.hpp"
#include "diag/call_log.hpp"
#include "runtime/pooled_storage.hpp"

namespace fsdp {

class Context;

class StepBoundary {
 public:
  explicit StepBoundary(Context& ctx) : ctx_(ctx) {}
  ~StepBoundary();  // frees the windows, in unit order (collective: the context's teardown)
  StepBoundary(const StepBoundary&) = delete;
  StepBoundary& operator=(const StepBoundary&) = delete;

  // Whether the context has (or had) units used by any subset of ranks.
  bool active() const { return published_ != nullptr; }
  // Unit creation of such a unit, collective over the world group: the unit's shard window
  // (collective over the shard group), and on the first one the phase counters' window.
  ShardWindow& add_window(uint64_t unit_id, std::size_t bytes);
  // The start of a logged call (Context::begin_call): counts collective calls, and ends this
  // rank's update phase unless the call belongs to it.
  void at_call(const CallInfo& call);
  // Ends this rank's update phase (if open): its shards' stores made visible, then published.
  void end_update();
  // Throws Errc::StepBoundary naming `what` (the unit to update) unless this rank is in an
  // update phase (a context without such units is never checked).
  void require_update(const std::string& what) const;
  // Before reading peers' shards (`world_ranks`: the ranks read): waits until each has closed
  // every update phase this rank opened. Throws Errc::Aborted if the context is aborted meanwhile.
  void wait_for_updates(const std::vector<int>& world_ranks);
  // World ranks of the shard group's members, by shard-group rank.
  const std::vector<int>& shard_world_ranks() const { return shard_world_; }
  // fsdp_step_boundary, collective over the world group.
  void boundary();
  // A checkpoint load writes shards: it opens an update phase after ending this rank's, on every
  // rank alike, and ends it once written (collective calls, so phases stay numbered alike).
  void begin_collective_update();
  // After the unit's shard was initialized on every rank (collective over the world group): its
  // values visible to the others' reads.
  void initialized(uint64_t unit_id);
  // After fsdp_abort: the windows are left to MPI (freeing them is collective).
  void abandon();
  // Ends the progress thread and frees every window and communicator (collective over the
  // world group): at the context's teardown, or at MPI_Finalize if that comes first (an
  // attribute of MPI_COMM_SELF, which MPI deletes first thing there, on every rank; a framework
  // may never finalize its context). Afterwards nothing may be read.
  void release_mpi();
  // The unsharded copies of such units: pool buffers private to the rank.
  UnshardedStorage& private_storage();

 private:
  void activate();  // the first such unit's creation: collective over the world group
  int64_t peer_phases(int world_rank);

  Context& ctx_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the boundary's own duplicate of the world communicator
  // Each rank's count of update phases closed: in node shared memory (read in place by the
  // node's ranks), and where shard groups span nodes also in an RMA window over the world.
  MPI_Comm world_node_ = MPI_COMM_NULL;
  MPI_Win phases_shared_ = MPI_WIN_NULL, phases_rma_ = MPI_WIN_NULL;
  int64_t* published_ = nullptr;             // this rank's, in the node's shared memory
  std::vector<const int64_t*> node_phases_;  // by world rank: a node peer's; else nullptr
  ShardPeers peers_;
  // Where shard groups span nodes: MPI is driven here so that other ranks' gets of this rank's
  // shards and counter complete while it computes or waits outside MPI.
  MPI_Comm progress_comm_ = MPI_COMM_NULL;
  std::thread progress_;
  std::atomic<bool> stop_{false};
  int finalize_key_ = MPI_KEYVAL_INVALID;
  bool released_ = false;
  int64_t opened_ = 0;  // update phases this rank opened
  bool updating_ = false;
  bool freeable_ = true;
  uint64_t collectives_ = 0;  // collective calls since the last boundary
  uint64_t boundaries_ = 0;
  std::string ended_by_;        // the call that ended the last update phase, for messages
  std::vector<int64_t> known_;  // by world rank: phases a peer was seen to have closed
  std::vector<int> shard_world_;
  std::map<uint64_t, std::unique_ptr<ShardWindow>> windows_;  // by unit id, for life
  std::unique_ptr<PooledStorage> storage_;
};

}  // namespace fsdp
