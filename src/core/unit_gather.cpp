#include "core/unit_gather.hpp"

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "base/mpi_datatypes.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"

namespace fsdp {

namespace {

// This rank's shard in fsdp.h's layout, storage dtype, into host memory `own`: a copy, or with
// split masters (UnitBytes::split_masters) the master pieces gathered across the replicas into the
// trainable block and the frozen block copied beside it.
void own_shard(Unit& unit, void* own) {
  Context& ctx = unit.context();
  const FlatLayout& l = unit.layout();
  const std::size_t esize = l.element_size();
  char* at = static_cast<char*>(own);
  if (!unit.split_masters()) {
    ctx.memory().copy(own, unit.shard_data(), unit.bytes().layout_shard());  // host or device
    ctx.memory().synchronize();
    return;
  }
  const std::size_t piece = l.grad_shard_numel();
  const Section& frozen = l.section(SectionKind::Frozen);
  const char* masters = static_cast<const char*>(unit.shard_data());
  ctx.memory().copy(at + l.update_offset(unit.update_piece()) * esize, masters, piece * esize);
  ctx.memory().copy(at + frozen.shard_base * esize,
                    masters + unit.bytes().block_offset(SectionKind::Frozen),
                    frozen.shard_numel * esize);
  ctx.memory().synchronize();
  const MpiCount n(piece, l.dtype());
  mpi_check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, own, n.n(), n.type(),
                          ctx.groups().replicate().comm),
            "MPI_Allgather");
}

}  // namespace

void gather_masters(Unit& unit, void* const* out, const std::optional<Error>& local_error) {
  Context& ctx = unit.context();
  const FlatLayout& l = unit.layout();
  const std::size_t esize = l.element_size(), full_bytes = l.padded_numel() * esize;
  const std::size_t own_bytes = unit.bytes().layout_shard();
  const Group& shard = ctx.groups().shard();
  // Split masters: the replicas' pieces are gathered too, so every rank of the job takes part.
  const Group& agreeing = unit.split_masters() ? ctx.groups().world() : shard;
  ctx.scheduler().quiesce();        // nothing of ours runs on the progress thread meanwhile
  ctx.before_cpu_touches_shards();  // device work on the shards has landed
  MemorySpace& host = ctx.host_memory();
  void* own = nullptr;
  void* full = nullptr;
  std::optional<Error> failed = local_error;
  if (!failed)
    failed = attempt([&] {
      own = host.allocate(own_bytes ? own_bytes : 1);
      full = host.allocate(full_bytes ? full_bytes : 1);
    });
  try {
    agree(agreeing, "fsdp_gather_params arguments and memory", unit.id(), failed);
    own_shard(unit, own);
    // Each section's blocks, rank after rank: the unsharded layout in the storage dtype.
    for (const Section& s : l.sections()) {
      if (s.numel == 0) continue;
      const MpiCount n(s.shard_numel, l.dtype());
      mpi_check(MPI_Allgather(static_cast<char*>(own) + s.shard_base * esize, n.n(), n.type(),
                              static_cast<char*>(full) + s.flat_base * esize, n.n(), n.type(),
                              shard.comm),
                "MPI_Allgather");
    }
    // Each parameter whole where the blocks are ranges of the unsharded order (one copy), else
    // its part of each rank's block (one range) to its place.
    for (std::size_t i = 0; i < l.num_params(); ++i) {
      if (!out[i]) continue;
      if (l.blocked()) {
        ctx.memory().copy(out[i], static_cast<char*>(full) + l.flat_offset(i) * esize,
                          l.param(i).numel * esize);
        continue;
      }
      const Section& s = l.section(l.section_of(i));
      for (int r = 0; r < l.shard_count(); ++r) {
        const ShardSlice part = l.slice(i, r);
        if (!part.length) continue;
        const std::size_t from = s.flat_base + static_cast<std::size_t>(r) * s.shard_numel +
                                 (part.shard_offset - s.shard_base);
        ctx.memory().copy(static_cast<char*>(out[i]) + part.param_offset * esize,
                          static_cast<char*>(full) + from * esize, part.length * esize);
      }
    }
    ctx.memory().synchronize();
  } catch (...) {
    if (own) host.deallocate(own, own_bytes ? own_bytes : 1);
    if (full) host.deallocate(full, full_bytes ? full_bytes : 1);
    throw;
  }
  host.deallocate(own, own_bytes ? own_bytes : 1);
  host.deallocate(full, full_bytes ? full_bytes : 1);
}

}  // namespace fsdp
