#include "core/unit_init.hpp"

#include <cstring>
#include <optional>
#include <vector>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "base/mpi_datatypes.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"

namespace fsdp {
namespace {

char* at(void* base, std::size_t element, std::size_t esize) {
  return static_cast<char*>(base) + element * esize;
}

// Initial values reach the shard through the context's buffer memory space's copy, which takes
// host or device pointers on either side (cudaMemcpyDefault): the caller's `values` may be host
// arrays, or device arrays in a CUDA context. A full-size unit is always host memory (the init
// callback writes it on the CPU).

// A full-size unit (padded, storage dtype, zeroed, host memory), accounted as initialization
// memory while it lives (fsdp_memory_stats().peak_init_bytes: apart from training's peaks).
class FullUnit {
 public:
  explicit FullUnit(Unit& u)
      : ctx_(u.context()), bytes_(u.layout().padded_numel() * u.layout().element_size()) {
    data_ = ctx_.host_memory().allocate(bytes_);
    ctx_.accounting().add(MemoryKind::Init, bytes_);
    ctx_.host_memory().zero(data_, bytes_);
  }
  ~FullUnit() {
    ctx_.host_memory().deallocate(data_, bytes_);
    ctx_.accounting().sub(MemoryKind::Init, bytes_);
  }
  FullUnit(const FullUnit&) = delete;
  FullUnit& operator=(const FullUnit&) = delete;
  void* data() const { return data_; }

 private:
  Context& ctx_;
  std::size_t bytes_;
  void* data_ = nullptr;
};

// The caller's values or callback, written into a full-size unit.
void materialize(Unit& u, const UnitSource& source, void* full) {
  const FlatLayout& l = u.layout();
  const std::size_t esize = l.element_size();
  for (std::size_t i = 0; i < l.num_params(); ++i) {
    void* dst = at(full, l.flat_offset(i), esize);
    if (source.init)
      source.init(i, dst);
    else if (source.values && source.values[i])
      u.context().memory().copy(dst, source.values[i], l.param(i).numel * esize);
  }
  u.context().memory().synchronize();  // the CPU reads `full` next
}

// This rank's shard in fsdp.h's layout, where the values are written: the unit's shard, or when
// the unit splits its masters (UnitBytes::split_masters) a zeroed copy in shard memory, accounted
// as initialization memory, that install() hands to the unit.
class ShardTarget {
 public:
  explicit ShardTarget(Unit& u) : u_(u), bytes_(u.bytes().layout_shard()) {
    if (!u.split_masters()) {
      data_ = u.shard_data();
      return;
    }
    staged_ = u.context().shard_memory().allocate(bytes_);
    u.context().accounting().add(MemoryKind::Init, bytes_);
    u.context().shard_memory().zero(staged_, bytes_);
    data_ = staged_;
  }
  ~ShardTarget() {
    if (!staged_) return;
    u_.context().shard_memory().deallocate(staged_, bytes_);
    u_.context().accounting().sub(MemoryKind::Init, bytes_);
  }
  ShardTarget(const ShardTarget&) = delete;
  ShardTarget& operator=(const ShardTarget&) = delete;
  void* data() const { return data_; }
  void install() {
    if (!staged_) return;
    u_.install_shard(staged_);
    u_.context().shard_memory().synchronize();  // before the staging goes
  }

 private:
  Unit& u_;
  std::size_t bytes_;
  void* staged_ = nullptr;
  void* data_ = nullptr;
};

// Each section's block for this rank, out of a full-size unit (a range of it, or in the dim-0
// layout each parameter's chunk).
void keep_own_blocks(Unit& u, const void* full, void* shard) {
  const FlatLayout& l = u.layout();
  const std::size_t esize = l.element_size();
  if (!l.blocked()) {
    for (std::size_t i = 0; i < l.num_params(); ++i) {
      const ShardSlice s = u.slice(i);
      if (s.length)
        u.context().memory().copy(
            at(shard, s.shard_offset, esize),
            at(const_cast<void*>(full), l.flat_offset(i) + s.param_offset, esize),
            s.length * esize);
    }
    return;
  }
  for (const Section& s : l.sections())
    if (s.shard_numel)
      u.context().memory().copy(
          at(shard, s.shard_base, esize),
          at(const_cast<void*>(full),
             s.flat_base + static_cast<std::size_t>(u.shard_rank()) * s.shard_numel, esize),
          s.shard_numel * esize);
}

// Only the slices this rank keeps are read: no full-size copy.
void copy_own_slices(Unit& u, const void* const* values, void* shard) {
  const FlatLayout& l = u.layout();
  const std::size_t esize = l.element_size();
  for (std::size_t i = 0; i < l.num_params(); ++i) {
    const ShardSlice s = u.slice(i);
    if (values[i] && s.length)
      u.context().memory().copy(at(shard, s.shard_offset, esize),
                                static_cast<const char*>(values[i]) + s.param_offset * esize,
                                s.length * esize);
  }
}

// The dim-0 layout: a full-size unit (`full`, each parameter at its place) with each section's
// blocks put rank after rank into `ranked` (zeroed: the padding stays zero), so that the blocks
// scatter as the flat layout's do.
void put_rank_after_rank(Unit& u, const void* full, void* ranked) {
  const FlatLayout& l = u.layout();
  const std::size_t esize = l.element_size();
  for (SectionKind k : {SectionKind::Trainable, SectionKind::Frozen}) {
    const Section& s = l.section(k);
    const char* from = at(const_cast<void*>(full), s.flat_base, esize);
    char* to = at(ranked, s.flat_base, esize);
    for_each_piece(
        l.pieces(k), s.shard_numel, 0, l.shard_count(),
        [&](std::size_t src, std::size_t dst, std::size_t n) {
          std::memcpy(to + dst * esize, from + src * esize, n * esize);
        },
        [](std::size_t, std::size_t) {});
  }
}

// World rank 0's full unit (blocks rank after rank) scattered over its shard group, then each block
// broadcast over its replicate group from the member of rank 0's shard group.
void distribute_from_rank0(Unit& u, const void* full, void* shard) {
  Context& ctx = u.context();
  const ProcessGroups& g = ctx.groups();
  const FlatLayout& l = u.layout();
  const std::size_t esize = l.element_size();
  const Rank0Roots& roots = u.context().rank0_roots();
  const bool is_root = g.world().rank == 0, holds_root = roots.shard_root >= 0;
  for (const Section& s : l.sections()) {
    if (!s.shard_numel) continue;
    const MpiCount c(s.shard_numel, l.dtype());
    const char* source = is_root ? at(const_cast<void*>(full), s.flat_base, esize) : nullptr;
    void* shard_block = at(shard, s.shard_base, esize);
    // MPI writes host memory: a device shard receives through a host copy.
    std::vector<char> staged;
    if (!ctx.shard_memory().host_accessible()) staged.resize(s.shard_numel * esize);
    void* block = staged.empty() ? shard_block : staged.data();
    if (holds_root)
      mpi_check(MPI_Scatter(source, c.n(), c.type(), block, c.n(), c.type(), roots.shard_root,
                            g.shard().comm),
                "MPI_Scatter");
    if (g.replicate().size > 1)
      mpi_check(MPI_Bcast(block, c.n(), c.type(), roots.replicate_root, g.replicate().comm),
                "MPI_Bcast");
    if (!staged.empty()) {
      ctx.memory().copy(shard_block, block, staged.size());
      ctx.memory().synchronize();  // before `staged` goes
    }
  }
}

}  // namespace

void initialize_shard(Unit& u, const UnitSource& source) {
  const Group& world = u.context().groups().world();
  // Device arrays the caller filled on its stream are read on the library's: after that work.
  u.context().memory().take_from_caller();
  if (source.from_rank0) {
    std::optional<FullUnit> full, ranked;  // ranked: the dim-0 layout's blocks, rank after rank
    std::optional<Error> local;
    if (world.rank == 0) {
      local = attempt([&] {
        full.emplace(u);
        materialize(u, source, full->data());
        if (!u.layout().blocked()) {
          ranked.emplace(u);
          put_rank_after_rank(u, full->data(), ranked->data());
          full.reset();
        }
      });
    }
    std::optional<ShardTarget> target;
    if (!local) local = attempt([&] { target.emplace(u); });
    agree(world, "initialization on rank 0", 0, local);
    distribute_from_rank0(u,
                          ranked ? ranked->data()
                          : full ? full->data()
                                 : nullptr,
                          target->data());
    if (u.split_masters())  // a local step that may fail on one rank: every rank learns of it
      agree(world, "initialization on rank 0", 0, attempt([&] { target->install(); }));
    return;
  }
  std::optional<Error> local = attempt([&] {
    ShardTarget target(u);
    if (source.init) {
      FullUnit full(u);
      materialize(u, source, full.data());
      keep_own_blocks(u, full.data(), target.data());
    } else if (source.values) {
      copy_own_slices(u, source.values, target.data());
    }
    target.install();
    u.context().memory().synchronize();  // the caller may reuse its arrays on return
  });
  agree(world, "parameter initialization", 0, local);
}

}  // namespace fsdp
