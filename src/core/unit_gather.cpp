#include "core/unit_gather.hpp"

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "base/mpi_datatypes.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"

namespace fsdp {

void gather_masters(Unit& unit, void* const* out, const std::optional<Error>& local_error) {
  Context& ctx = unit.context();
  const FlatLayout& l = unit.layout();
  const std::size_t esize = l.element_size(), full_bytes = l.padded_numel() * esize;
  const Group& shard = ctx.groups().shard();
  ctx.scheduler().quiesce();        // nothing of ours runs on the progress thread meanwhile
  ctx.before_cpu_touches_shards();  // device work on the shards has landed
  MemorySpace& host = ctx.host_memory();
  void* own = nullptr;
  void* full = nullptr;
  std::optional<Error> failed = local_error;
  if (!failed)
    failed = attempt([&] {
      own = host.allocate(unit.shard_bytes() ? unit.shard_bytes() : 1);
      full = host.allocate(full_bytes ? full_bytes : 1);
    });
  try {
    agree(shard, "fsdp_gather_params arguments and memory", unit.id(), failed);
    ctx.memory().copy(own, unit.shard_data(), unit.shard_bytes());  // host or device shard
    ctx.memory().synchronize();
    // Each section's blocks, rank after rank: the unsharded layout in the storage dtype.
    for (const Section& s : l.sections()) {
      if (s.numel == 0) continue;
      const MpiCount n(s.shard_numel, l.dtype());
      mpi_check(MPI_Allgather(static_cast<char*>(own) + s.shard_base * esize, n.n(), n.type(),
                              static_cast<char*>(full) + s.flat_base * esize, n.n(), n.type(),
                              shard.comm),
                "MPI_Allgather");
    }
    for (std::size_t i = 0; i < l.num_params(); ++i)
      if (out[i])
        ctx.memory().copy(out[i], static_cast<char*>(full) + l.flat_offset(i) * esize,
                          l.param(i).numel * esize);
    ctx.memory().synchronize();
  } catch (...) {
    if (own) host.deallocate(own, unit.shard_bytes() ? unit.shard_bytes() : 1);
    if (full) host.deallocate(full, full_bytes ? full_bytes : 1);
    throw;
  }
  host.deallocate(own, unit.shard_bytes() ? unit.shard_bytes() : 1);
  host.deallocate(full, full_bytes ? full_bytes : 1);
}

}  // namespace fsdp
