#include "checkpoint/checkpoint_service.hpp"

#include "base/fingerprint.hpp"
#include "base/mpi_check.hpp"
#include "core/context.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"

namespace fsdp::ckpt {
namespace {

// What save and load requests share: the state they carry.
void add_state(Fingerprint& f, const std::string& path, const std::vector<Optimizer*>& optimizers,
               const GradScaler* scaler) {
  f.add(path);
  f.add(static_cast<uint64_t>(optimizers.size()));
  for (const Optimizer* o : optimizers) f.add(o ? o->id() : ~0ull);
  f.add(scaler ? scaler->id() : ~0ull);
}

}  // namespace

uint64_t request_fingerprint(const SaveRequest& r) {
  Fingerprint f;
  add_state(f, r.path, r.optimizers, r.scaler);
  f.add(static_cast<uint64_t>(r.metadata.size()));
  for (const auto& kv : r.metadata) f.add(kv.first), f.add(kv.second);
  return f.value();
}

uint64_t request_fingerprint(const LoadRequest& r) {
  Fingerprint f;
  add_state(f, r.path, r.optimizers, r.scaler);
  f.add(static_cast<uint64_t>(r.partial) | static_cast<uint64_t>(r.model_only) << 1 |
        static_cast<uint64_t>(r.convert) << 2);
  return f.value();
}

CheckpointService& CheckpointService::of(Context& ctx) {
  if (ContextPart* p = ctx.part(PartSlot::Checkpoints)) return static_cast<CheckpointService&>(*p);
  auto s = std::make_unique<CheckpointService>(ctx);
  CheckpointService& ref = *s;
  ctx.set_part(PartSlot::Checkpoints, std::move(s));
  return ref;
}

CheckpointService::~CheckpointService() {
  wait_pending();
  worker_.reset();
  for (MPI_Comm* c : {&all_, &writers_, &shard_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void CheckpointService::wait_pending() {
  if (!pending_) return;
  try {
    pending_->wait();
  } catch (...) {  // the error belongs to the save's request
  }
  pending_.reset();
}

void CheckpointService::ensure_comms() {
  if (all_ != MPI_COMM_NULL) return;
  const ProcessGroups& g = ctx_.groups();
  mpi_check(MPI_Comm_dup(g.world().comm, &all_), "MPI_Comm_dup");
  // One replica (replicate rank 0) writes, its members in shard order; with HFSDP every rank
  // writes the optimizer state it holds, so all do (in world order).
  const bool hfsdp = ctx_.options().hfsdp;
  mpi_check(MPI_Comm_split(all_, hfsdp || g.replicate().rank == 0 ? 0 : MPI_UNDEFINED,
                           hfsdp ? g.world().rank : g.shard().rank, &writers_),
            "MPI_Comm_split");
  mpi_check(MPI_Comm_dup(g.shard().comm, &shard_), "MPI_Comm_dup");
  for (MPI_Comm c : {all_, writers_, shard_})
    if (c != MPI_COMM_NULL) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  worker_ = std::make_unique<CommWorker>(ctx_.worker().threaded());
}

}  // namespace fsdp::ckpt
