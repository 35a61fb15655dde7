#include "core/secondary_partition.hpp"

#include <string>

#include "base/error.hpp"
#include "core/context.hpp"
#include "core/process_groups.hpp"
#include "core/unit.hpp"

namespace fsdp {

int hpz_node_ranks(bool hpz, int f, const Topology& topo) {
  if (!hpz) return 0;
  const int rpn = topo.ranks_per_node;
  if (rpn == 0)
    fail(Errc::InvalidArgument,
         "cfg->hpz = 1: nodes hold different numbers of ranks (up to " +
             std::to_string(topo.largest_node) +
             "); a node-local secondary partition needs the same number on every node");
  if (rpn % f == 0) return 0;  // each shard group inside one node: nothing to keep
  if (f % rpn != 0)
    fail(Errc::InvalidArgument,
         "cfg->hpz = 1: a shard group of " + std::to_string(f) + " ranks spans nodes of " +
             std::to_string(rpn) +
             " ranks unevenly; hpZ needs the ranks per node to divide "
             "cfg->sharding_factor (or the factor to divide the ranks per node)");
  return rpn;
}

bool SecondaryPartition::active(const Context& ctx) {
  return ctx.groups().node_shard().comm != MPI_COMM_NULL;
}

namespace {

// The number of elements of one node-group rank's piece of section `s`.
std::size_t piece_numel(const Section& s, int f, int r) {
  return s.shard_numel * static_cast<std::size_t>(f / r);
}

}  // namespace

void SecondaryPartition::keep(Unit& unit, const void* full) {
  Context& ctx = unit.context();
  const FlatLayout& l = unit.layout();
  const Group& node = ctx.groups().node_shard();
  const int f = l.shard_count();
  const std::size_t es = dtype_size(unit.precision().param);
  piece_ = ctx.pool().acquire(unit.unsharded_bytes() / static_cast<std::size_t>(node.size),
                              BufferPool::Use::Secondary);
  std::size_t at = 0;
  for (const Section& s : l.sections()) {
    const std::size_t n = piece_numel(s, f, node.size);
    const std::size_t first = s.flat_base + static_cast<std::size_t>(node.rank) * n;
    ctx.memory().copy(static_cast<char*>(piece_.data()) + at * es,
                      static_cast<const char*>(full) + first * es, n * es);
    at += n;
  }
}

void SecondaryPartition::gather(Unit& unit, const Located& full) const {
  Context& ctx = unit.context();
  const FlatLayout& l = unit.layout();
  const Group& node = ctx.groups().node_shard();
  const DType p = unit.precision().param;
  const std::size_t es = dtype_size(p);
  std::size_t at = 0;
  for (const Section& s : l.sections()) {
    const std::size_t n = piece_numel(s, l.shard_count(), node.size);
    if (n) {
      const char* own = static_cast<const char*>(piece_.data()) + at * es;
      ctx.transport().all_gather(own, full.at(s.flat_base * es), n, p, node);
    }
    at += n;
  }
}

}  // namespace fsdp
