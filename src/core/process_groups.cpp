#include "core/process_groups.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/environment.hpp"
#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp {
namespace {

Group make_group(MPI_Comm comm) {
  Group g;
  g.comm = comm;
  mpi_check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  mpi_check(MPI_Comm_rank(comm, &g.rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &g.size), "MPI_Comm_size");
  return g;
}

// FSDP_RANKS_PER_NODE, or 0.
int ranks_per_node_override() {
  const char* v = env(Env::RanksPerNode);
  if (!v) return 0;
  char* end = nullptr;
  const long k = std::strtol(v, &end, 10);
  if (*end != '\0' || k < 1 || k > 1 << 20)
    fail(Errc::InvalidArgument,
         std::string("environment FSDP_RANKS_PER_NODE=") + v + ": expected a positive integer");
  return static_cast<int>(k);
}

}  // namespace

Topology discover_topology(MPI_Comm comm) {
  int rank = 0;
  Topology t;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &t.world_size), "MPI_Comm_size");

  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int node_rank = 0, members = 1, leader = rank;
  int rc = MPI_Comm_rank(node, &node_rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &members);
  std::vector<int> node_ranks(static_cast<std::size_t>(members));
  if (rc == MPI_SUCCESS) rc = MPI_Allgather(&rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);
  mpi_check(rc, "MPI_Allgather");
  leader = node_ranks[0];  // the lowest world rank (the split is keyed by it)
  // Testing aid: nodes cut into "nodes" of k ranks, to exercise multi-node code on one machine.
  if (const int k = ranks_per_node_override(); k > 0) {
    leader = node_ranks[static_cast<std::size_t>(node_rank / k * k)];
    node_rank %= k;
  }

  // Every rank learns every rank's (node leader, rank in node) and orders ranks by them.
  const int mine[2] = {leader, node_rank};
  std::vector<int> all(2 * static_cast<std::size_t>(t.world_size));
  mpi_check(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm), "MPI_Allgather");
  std::vector<int> leaders;
  for (int r = 0; r < t.world_size; ++r) leaders.push_back(all[2 * r]);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  t.node_count = static_cast<int>(leaders.size());

  std::vector<int> node_size(leaders.size(), 0);
  for (int r = 0; r < t.world_size; ++r) {
    auto idx = std::lower_bound(leaders.begin(), leaders.end(), all[2 * r]) - leaders.begin();
    ++node_size[static_cast<std::size_t>(idx)];
  }
  const bool uniform =
      std::all_of(node_size.begin(), node_size.end(), [&](int n) { return n == node_size[0]; });
  t.ranks_per_node = uniform ? node_size[0] : 0;
  t.largest_node = *std::max_element(node_size.begin(), node_size.end());

  const auto my_node = std::lower_bound(leaders.begin(), leaders.end(), leader) - leaders.begin();
  t.position = node_rank;
  t.node_rank = node_rank;
  t.node_leader = leader;
  for (auto i = 0; i < my_node; ++i) t.position += node_size[static_cast<std::size_t>(i)];
  return t;
}

int resolve_sharding_factor(Strategy strategy, int requested, const Topology& topo) {
  const int w = topo.world_size;
  const std::string ws = std::to_string(w);
  if (requested < 0 || requested > w)
    fail(Errc::InvalidArgument, "cfg->sharding_factor = " + std::to_string(requested) +
                                    ": must be 0 (default) or between 1 and the world size " + ws);
  switch (strategy) {
    case Strategy::FullShard:
      if (requested != 0 && requested != w)
        fail(Errc::InvalidArgument, "cfg->sharding_factor = " + std::to_string(requested) +
                                        ": FSDP_FULL_SHARD shards over all " + ws +
                                        " ranks; use FSDP_HYBRID_SHARD for a smaller factor");
      return w;
    case Strategy::NoShard:
      if (requested > 1)
        fail(Errc::InvalidArgument, "cfg->sharding_factor = " + std::to_string(requested) +
                                        ": FSDP_NO_SHARD means a factor of 1");
      return 1;
    case Strategy::HybridShard: {
      int f = requested;
      if (f == 0) {
        if (topo.ranks_per_node == 0)
          fail(Errc::InvalidArgument,
               "cfg->sharding_factor = 0: nodes hold different numbers of ranks, so there is no "
               "default for FSDP_HYBRID_SHARD; set the factor explicitly");
        f = topo.ranks_per_node;
      }
      if (w % f != 0)
        fail(Errc::InvalidArgument, "cfg->sharding_factor = " + std::to_string(f) +
                                        " does not divide the world size " + ws);
      return f;
    }
  }
  fail(Errc::InvalidArgument, "cfg->strategy: unknown sharding strategy");
}

ProcessGroups::ProcessGroups(MPI_Comm world, const Topology& topo, int f, int node_ranks) {
  world_ = make_group(world);
  try {
    // Position p = node-major rank order; shard group p / F, index inside it p % F.
    MPI_Comm shard = MPI_COMM_NULL, replicate = MPI_COMM_NULL;
    mpi_check(MPI_Comm_split(world, topo.position / f, topo.position, &shard), "MPI_Comm_split");
    shard_ = make_group(shard);
    mpi_check(MPI_Comm_split(world, topo.position % f, topo.position, &replicate),
              "MPI_Comm_split");
    replicate_ = make_group(replicate);
    if (node_ranks > 0) {  // ranks are node-major: shard ranks [k*R, (k+1)*R) share a node
      MPI_Comm node = MPI_COMM_NULL;
      mpi_check(MPI_Comm_split(shard_.comm, shard_.rank / node_ranks, shard_.rank, &node),
                "MPI_Comm_split");
      node_shard_ = make_group(node);
    }
  } catch (...) {  // `world` stays the caller's until construction succeeds
    free_group(node_shard_);
    free_group(replicate_);
    free_group(shard_);
    throw;
  }
}

ProcessGroups::~ProcessGroups() {
  free_group(node_shard_);
  free_group(replicate_);
  free_group(shard_);
  free_group(world_);
}

}  // namespace fsdp
