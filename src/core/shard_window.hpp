// One unit's shard where every rank of its shard group can read it without the owner taking part,
// for a unit any subset of ranks may use (FSDP_USED_BY_ANY_RANKS). The shard lives in node shared
// memory (MPI_Win_allocate_shared over the shard group's ranks on this node): a node peer's block
// is read with a plain copy. Where the shard group spans nodes, the same memory is also exposed in
// an MPI-3 RMA window over the whole shard group, read with passive-target gets (a shared lock on
// every rank held for the window's life); the owner's side of those progresses through
// core/step_boundary.hpp's progress thread.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace fsdp {

// Who in a shard group shares this rank's node (one per context, core/step_boundary.hpp).
struct ShardPeers {
  MPI_Comm shard = MPI_COMM_NULL;  // the shard group
  MPI_Comm node = MPI_COMM_NULL;   // its ranks on this node, ordered by shard rank
  std::vector<int> node_index;     // by shard rank: its rank in `node`, -1 on another node
  bool spans_nodes = false;        // some shard group of the context spans nodes
};

class ShardWindow {
 public:
  // Collective over the shard group: `bytes` of shard memory on this rank.
  ShardWindow(const ShardPeers& peers, std::size_t bytes);
  // Collective over the group (MPI_Win_free): the context frees its windows together, in unit
  // order, at its teardown. Skipped after MPI_Finalize or an abort (abandon()).
  ~ShardWindow();
  ShardWindow(const ShardWindow&) = delete;
  ShardWindow& operator=(const ShardWindow&) = delete;

  void* data() const { return base_; }
  // Starts reading `bytes` at byte `offset` of shard rank `rank`'s memory into `out` (local
  // memory); complete once flush() returns.
  void get(int rank, std::size_t offset, std::size_t bytes, void* out);
  void flush();
  // This rank's stores into its shard become visible to the others' reads.
  void sync();
  void abandon() { freeable_ = false; }
  // Frees the MPI objects now (collective over the group, as the destructor): the memory goes.
  void release();

 private:
  MPI_Win shared_ = MPI_WIN_NULL, rma_ = MPI_WIN_NULL;
  void* base_ = nullptr;
  std::vector<char*> local_;  // by shard rank: a node peer's shard, mapped here; else nullptr
  bool pending_gets_ = false;
  bool freeable_ = true;
};

}  // namespace fsdp
