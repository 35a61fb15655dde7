// hpZ (DeepSpeed ZeRO++'s hierarchical partitioning; fsdp_config_t.hpz, doc/hpz.md): a unit
// resharded after a forward use keeps a secondary partition, this rank's 1/R of the unit's
// unsharded parameters (R: the ranks of its shard group on this node), so that its next unshard
// all-gathers inside the node only (the "node group": the shard group's members on this node).
//
// Layout. The unsharded buffer is, per section, F blocks of shard_numel (core/flat_layout.hpp),
// block b belonging to shard rank b; ranks are ordered node by node and R divides F, so the
// shard group's k-th node holds shard ranks [k*R, (k+1)*R) and its node-group rank j is shard
// rank % R. Node-group rank j keeps blocks [j*F/R, (j+1)*F/R) of each section: one contiguous,
// aligned piece per section, copied out of the unsharded buffer at the reshard (no
// communication), and the node group's all-gather of those pieces rebuilds every section in place.
//
// A forward use: a hold (the caller's unshard to its reshard) during which no gradient was
// written through the unit's grad_data. A secondary lives from that reshard until the unit's next
// unshard completes (it is read by that unshard's all-gather, then returned to the pool), or is
// dropped unused by whatever may change the shards it was copied from: the library's optimizer
// step, norm, unscaling, checkpoint save or load (Context::before_shard_update), and
// fsdp_shard_data (a writable shard pointer). It is never read after the shards changed.
#pragma once

#include "memory/located.hpp"
#include "runtime/lease.hpp"

namespace fsdp {

class Context;
class Unit;
struct Topology;

// R for hpZ: the ranks of a shard group of `sharding_factor` ranks on each node when the group
// spans nodes, 0 when hpZ acts on nothing (off, or each shard group inside one node: a secondary
// would be the unit itself). Throws InvalidArgument naming cfg->hpz when the nodes hold different
// numbers of ranks, or a shard group covers part of a node and spans nodes. Local; the same
// answer on every rank.
int hpz_node_ranks(bool hpz, int sharding_factor, const Topology& topo);

class SecondaryPartition {
 public:
  // Whether units of `ctx` keep secondaries (hpZ on and the shard group spans nodes).
  static bool active(const Context& ctx);

  bool held() const { return static_cast<bool>(piece_); }
  // At the reshard of a forward use (caller's thread, `full` still the unit's unsharded buffer):
  // this rank's piece of each section copied out of it. Throws Errc::OutOfMemory, keeping
  // nothing.
  void keep(Unit& unit, const void* full);
  // On the progress thread, in collective order over the node group: every section of `full`
  // rebuilt from the node group's pieces.
  void gather(Unit& unit, const Located& full) const;
  // Local, caller's thread.
  void drop() { piece_.reset(); }

 private:
  Lease piece_;
};

}  // namespace fsdp
