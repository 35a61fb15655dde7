#include "placement/transport_table.hpp"

#include <string>

#include "base/agreement.hpp"

namespace fsdp {
namespace {

bool host(const SelectionFacts& f) {
  return f.memory == MemoryPlace::Host;
}

Serves nccl(const SelectionFacts& f) {
  if (host(f)) return Serves::No;
  if (f.requested == TransportKind::Nccl) {
    if (!f.nccl_built)
      fail(Errc::Unsupported,
           "cfg->transport = FSDP_TRANSPORT_NCCL: this libfsdp was built without NCCL");
    if (f.shared_gpu.first >= 0)
      fail(Errc::Unsupported, "cfg->transport = FSDP_TRANSPORT_NCCL: world ranks " +
                                  std::to_string(f.shared_gpu.first) + " and " +
                                  std::to_string(f.shared_gpu.second) +
                                  " use the same GPU, which NCCL "
                                  "refuses; give each rank its own GPU or use FSDP_TRANSPORT_MPI");
    return Serves::Must;
  }
  // AUTO, and the shared-memory kinds FSDP_TRANSPORT may name for host contexts.
  if (f.requested == TransportKind::Mpi) return Serves::No;
  return f.nccl_built && f.shared_gpu.first < 0 ? Serves::Must : Serves::No;
}

Serves zero_copy(const SelectionFacts& f) {
  return host(f) && f.requested == TransportKind::ShmZeroCopy ? Serves::Must : Serves::No;
}

Serves shm(const SelectionFacts& f) {
  if (!host(f)) return Serves::No;
  if (f.requested == TransportKind::Shm) return Serves::Must;
  // FSDP_TRANSPORT=nccl reaches host contexts through the environment, and means AUTO there.
  return f.requested == TransportKind::Auto || f.requested == TransportKind::Nccl ? Serves::Try
                                                                                  : Serves::No;
}

Serves staged(const SelectionFacts& f) {
  return host(f) ? Serves::No : Serves::Must;
}

Serves mpi(const SelectionFacts& f) {
  return host(f) ? Serves::Must : Serves::No;
}

const TransportEntry kTransports[] = {
    {"nccl", TransportKind::Nccl, nccl, "NCCL communicator setup", make_nccl_stack, nullptr},
    {"zero-copy", TransportKind::ShmZeroCopy, zero_copy,
     "shared-memory transport setup (cfg->transport = FSDP_TRANSPORT_SHM_ZERO_COPY)",
     make_zero_copy_stack, "mpi"},
    {"shm", TransportKind::Shm, shm,
     "shared-memory transport setup (cfg->transport = FSDP_TRANSPORT_SHM)", make_shm_stack, "mpi"},
    {"staged", TransportKind::Mpi, staged, "transport selection", make_staged_stack, "mpi"},
    {"mpi", TransportKind::Mpi, mpi, "transport selection", make_mpi_stack, nullptr},
};

// The builder of the entry named `name`.
StackBuilder builder(const char* name) {
  for (const TransportEntry& e : kTransports)
    if (std::string(e.name) == name) return e.build;
  fail(Errc::Internal, std::string("transport table: no entry '") + name + "'");
}

}  // namespace

Chosen walk_transport_table(const SelectionFacts& facts, const StackInputs& inputs,
                            Agreement& agreement) {
  for (const TransportEntry& entry : kTransports) {
    Serves how = Serves::No;
    agreement.all_or_none("transport selection", attempt([&] { how = entry.serves(facts); }));
    if (how == Serves::No) continue;
    StackInputs in = inputs;
    in.tried = how == Serves::Try;
    in.delegate = entry.delegate ? builder(entry.delegate) : nullptr;
    Chosen c{&entry, nullptr};
    const std::optional<Error> failed = attempt([&] { c.stack = entry.build(in); });
    if (how == Serves::Must) {
      agreement.all_or_none(entry.setup, failed);
      return c;
    }
    if (agreement.everywhere(!failed && c.stack->worth_it())) return c;
    // The next entry, on every rank. Letting this one go is collective over the groups it set up,
    // whose members all built it.
  }
  fail(Errc::Internal, "no transport serves this placement");  // the last entries serve any
}

}  // namespace fsdp
