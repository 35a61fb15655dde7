// C entry points for contexts.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "base/mpi_check.hpp"
#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/config.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/mpi_args.hpp"
#include "capi/sized_struct.hpp"
#include "optim/registry.hpp"
#include "placement/select.hpp"

using fsdp::Context;
using fsdp::Errc;
using fsdp::Error;
using fsdp::fail;
using fsdp::capi::context_from;
using fsdp::capi::enum_int;
using fsdp::capi::require_usable_mpi;

namespace {

void init(std::optional<Error> local, MPI_Comm comm, const fsdp_config_t* cfg,
          fsdp_context_t* ctx) {
  require_usable_mpi(comm);
  // Errors in this rank's own arguments (`local`: a NULL `ctx`, found by the entry point) still
  // take part in the collective check, so every rank fails together instead of the others hanging.
  fsdp::ContextOptions options;
  if (!local)
    local = fsdp::attempt([&] {
      options = fsdp::capi::options_from_config(cfg);
      fsdp::apply_environment(options);
    });
  std::unique_ptr<Context> c = Context::create(comm, options, local, fsdp::make_backend);
  fsdp::capi::register_context(c.get());
  *ctx = fsdp::capi::to_handle(c.release());
}

// The context's group an fsdp_group_t names; InvalidArgument for any other value.
// Takes the value as an int (enum_int): loading an out-of-range fsdp_group_t is undefined.
const fsdp::Group& group_of(const Context& c, int group) {
  switch (group) {
    case FSDP_GROUP_WORLD: return c.groups().world();
    case FSDP_GROUP_SHARD: return c.groups().shard();
    case FSDP_GROUP_REPLICATE: return c.groups().replicate();
    case FSDP_GROUP_NODE: {
      static const fsdp::Group alone{MPI_COMM_SELF, 0, 1};  // hpZ off or keeping nothing
      const fsdp::Group& node = c.groups().node_shard();
      return node.comm != MPI_COMM_NULL ? node : alone;
    }
    default:
      fail(Errc::InvalidArgument, "group = " + std::to_string(group) + ": not an fsdp_group_t");
  }
}

// What fsdp_broadcast and fsdp_allreduce share (their entry points record the call with the
// same fingerprint): their arguments (`args`, fingerprinted) checked on this rank by `check`,
// agreed over the world group (every rank calls them, whichever group they name; a refusal on
// any rank fails every rank), then nothing of ours left running on the progress thread. Returns
// when the caller may communicate.
template <class Check>
void agree_group_call(Context& c, const char* what, std::initializer_list<uint64_t> args,
                      Check check) {
  const std::optional<Error> local = fsdp::attempt(check);
  fsdp::agree(c.groups().world(), what, fsdp::capi::arguments_fingerprint(args), local);
  c.scheduler().quiesce();
}

// body(offset, n) over [0, total) in pieces of at most `chunk` (MPI counts are ints).
template <class Body>
void in_int_counts(size_t total, size_t chunk, Body body) {
  for (size_t done = 0; done < total;) {
    const int n = static_cast<int>(std::min(total - done, chunk));
    body(done, n);
    done += static_cast<size_t>(n);
  }
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_init(std::optional<Error> local, MPI_Comm comm, const fsdp_config_t* cfg,
               fsdp_context_t* ctx) {
  init(std::move(local), comm, cfg, ctx);
}

void fsdp_init_fcomm(std::optional<Error> local, int fcomm, const fsdp_config_t* cfg,
                     fsdp_context_t* ctx) {
  static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint is not an int in this MPI");
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_Comm_f2c needs MPI initialized; init() reports it when not.
  init(std::move(local), initialized ? MPI_Comm_f2c(static_cast<MPI_Fint>(fcomm)) : MPI_COMM_NULL,
       cfg, ctx);
}

void fsdp_finalize(fsdp_context_t* ctx) {
  Context& c = fsdp::capi::context_for_abort(*ctx, "*ctx");
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (fsdp::Unit* u : c.units()) fsdp::capi::retire(u, fsdp::capi::Retired::Finalized);
  for (fsdp::Optimizer* o : fsdp::OptimizerRegistry::of(c).optimizers())
    fsdp::capi::retire(o, fsdp::capi::Retired::Finalized);
  for (fsdp::GradScaler* s : fsdp::OptimizerRegistry::of(c).grad_scalers())
    fsdp::capi::retire(s, fsdp::capi::Retired::Finalized);
  for (fsdp::Request* r : c.scheduler().requests())
    fsdp::capi::retire(r, fsdp::capi::Retired::Finalized);
  fsdp::capi::retire(&c, fsdp::capi::Retired::Finalized);
  delete &c;
  *ctx = nullptr;
  if (finalized)
    fail(Errc::Mpi,
         "*ctx: called after MPI_Finalize; host memory was freed but the context's "
         "communicators could not be");
}

void fsdp_group_info(fsdp::Context& ctx, const fsdp_group_t& group, int* rank, int* size) {
  const fsdp::Group* g = &group_of(ctx, enum_int(group));
  if (rank) *rank = g->rank;
  if (size) *size = g->size;
}

void fsdp_context_config(fsdp::Context& c, int* sharding_factor, fsdp_sharding_strategy_t* strategy,
                         fsdp_grad_reduction_t* grad_reduction) {
  if (sharding_factor) *sharding_factor = c.sharding_factor();
  if (strategy) *strategy = static_cast<fsdp_sharding_strategy_t>(c.options().strategy);
  if (grad_reduction)
    *grad_reduction = static_cast<fsdp_grad_reduction_t>(c.options().grad_reduction);
}

void fsdp_memory_stats(fsdp::Context& c, fsdp_memory_stats_t* stats) {
  if (!stats) fail(Errc::InvalidArgument, "stats: NULL");
  const fsdp::MemoryAccounting& a = c.accounting();
  fsdp_memory_stats_t s;
  s.shard_bytes = a.bytes(fsdp::MemoryKind::Shard);
  s.grad_shard_bytes = a.bytes(fsdp::MemoryKind::GradShard);
  s.unsharded_bytes = a.bytes(fsdp::MemoryKind::Unsharded);
  s.pool_cached_bytes = a.bytes(fsdp::MemoryKind::PoolCached);
  s.peak_bytes = a.peak();
  s.unsharded_model_bytes = c.unsharded_model_bytes();
  s.scratch_bytes = a.bytes(fsdp::MemoryKind::Scratch);
  s.full_grad_bytes = a.bytes(fsdp::MemoryKind::FullGrad);
  s.optimizer_state_bytes = a.bytes(fsdp::MemoryKind::OptimizerState);
  s.peak_parameter_bytes = a.peak_parameters();
  s.peak_shard_bytes = a.peak(fsdp::MemoryKind::Shard);
  s.peak_grad_shard_bytes = a.peak(fsdp::MemoryKind::GradShard);
  s.peak_unsharded_bytes = a.peak(fsdp::MemoryKind::Unsharded);
  s.peak_full_grad_bytes = a.peak(fsdp::MemoryKind::FullGrad);
  s.peak_optimizer_state_bytes = a.peak(fsdp::MemoryKind::OptimizerState);
  s.allocation_calls = c.allocation_calls();
  s.peak_init_bytes = a.peak(fsdp::MemoryKind::Init);
  const fsdp::PrefetchStats& p = c.scheduler().prefetch_stats();
  s.prefetches_started = p.started;
  s.prefetches_used = p.used;
  s.prefetches_unused = p.unused;
  s.prefetches_skipped_limit = p.skipped_limit;
  s.secondary_bytes = a.bytes(fsdp::MemoryKind::Secondary);
  s.peak_secondary_bytes = a.peak(fsdp::MemoryKind::Secondary);
  fsdp::capi::write_sized(stats, s, "stats");
}

void fsdp_broadcast(fsdp::Context& c, const fsdp_group_t& group, int root, void* data,
                    size_t bytes) {
  const fsdp::Group* g = nullptr;
  agree_group_call(
      c, "fsdp_broadcast arguments (group, root, bytes)",
      {static_cast<uint64_t>(enum_int(group)), static_cast<uint64_t>(static_cast<int64_t>(root)),
       static_cast<uint64_t>(bytes)},
      [&] {
        g = &group_of(c, enum_int(group));
        if (root < 0 || root >= g->size)
          fail(Errc::InvalidArgument, "root = " + std::to_string(root) + ": the group has " +
                                          std::to_string(g->size) + " ranks");
        if (!data && bytes > 0)
          fail(Errc::InvalidArgument, "data: NULL for " + std::to_string(bytes) + " bytes");
      });
  char* p = static_cast<char*>(data);
  in_int_counts(bytes, size_t{1} << 30, [&](size_t done, int n) {
    fsdp::mpi_check(MPI_Bcast(p + done, n, MPI_BYTE, root, g->comm), "MPI_Bcast");
  });
}

void fsdp_allreduce(fsdp::Context& c, const fsdp_group_t& group, const fsdp_reduce_op_t& op,
                    double* data, size_t count) {
  const fsdp::Group* g = nullptr;
  MPI_Op mpi_op = MPI_SUM;
  agree_group_call(c, "fsdp_allreduce arguments (group, op, count)",
                   {static_cast<uint64_t>(enum_int(group)), static_cast<uint64_t>(enum_int(op)),
                    static_cast<uint64_t>(count)},
                   [&] {
                     g = &group_of(c, enum_int(group));
                     switch (enum_int(op)) {
                       case FSDP_OP_SUM: mpi_op = MPI_SUM; break;
                       case FSDP_OP_MAX: mpi_op = MPI_MAX; break;
                       case FSDP_OP_MIN: mpi_op = MPI_MIN; break;
                       default:
                         fail(Errc::InvalidArgument,
                              "op = " + std::to_string(enum_int(op)) + ": not an fsdp_reduce_op_t");
                     }
                     if (!data && count > 0)
                       fail(Errc::InvalidArgument,
                            "data: NULL for " + std::to_string(count) + " values");
                   });
  in_int_counts(count, size_t{1} << 27, [&](size_t done, int n) {
    fsdp::mpi_check(MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_DOUBLE, mpi_op, g->comm),
                    "MPI_Allreduce");
  });
}

void fsdp_reset_peak_memory(fsdp::Context& ctx) {
  ctx.accounting().reset_peaks();
}

void fsdp_set_grad_sync(fsdp::Context& ctx, int enabled) {
  if (enabled != 0 && enabled != 1)
    fail(Errc::InvalidArgument, "enabled = " + std::to_string(enabled) + ": must be 0 or 1");
  ctx.set_grad_sync(enabled != 0);
}

void fsdp_step_boundary(fsdp::Context& ctx) {
  ctx.step_boundary().boundary();
}

void fsdp_trim_pool(fsdp::Context& ctx) {
  ctx.trim();
}

}  // namespace fsdp::capi::body
