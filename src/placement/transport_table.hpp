// The transports a context can use, as a table (NCCL's ncclTransports[]): each entry says whether
// it serves a placement and builds itself. Selection walks the table once, in order; the first
// entry that serves is built. An entry that is only tried (FSDP_TRANSPORT_AUTO's shared memory)
// and cannot be built, or is not worth it, on some rank gives way to the next entry, on every
// rank: falling back is choosing the next entry. An entry asked for (FSDP_TRANSPORT_SHM, _NCCL)
// that cannot be built is an error on every rank.
//
//   entry       memory  serves                                           resolves to
//   nccl        CUDA    asked for (an error if NCCL is missing or ranks  NCCL
//                       share a GPU); any request but MPI when NCCL is
//                       built and no two ranks share a GPU
//   zero-copy   host    asked for                                        SHM_ZERO_COPY
//   shm         host    asked for; tried under AUTO (and NCCL, which     SHM
//                       means AUTO for host memory)
//   staged      CUDA    always (MPI through pinned host buffers)         MPI
//   mpi         host    always                                           MPI
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "base/error.hpp"
#include "core/placement.hpp"
#include "placement/link.hpp"

namespace fsdp {

// What every rank knows alike before the walk.
struct SelectionFacts {
  MemoryPlace memory = MemoryPlace::Host;
  TransportKind requested = TransportKind::Auto;
  bool nccl_built = false;
  // The first two world ranks that use one GPU (-1, -1: none), which NCCL refuses.
  std::pair<int, int> shared_gpu{-1, -1};
};

enum class Serves { No, Try, Must };

struct TransportEntry {
  const char* name;
  TransportKind resolved;  // Placement::transport once chosen
  // Throws Errc::Unsupported where the entry is asked for and cannot serve.
  Serves (*serves)(const SelectionFacts& facts);
  const char* setup;  // names its setup in the error every rank reports
  std::unique_ptr<Link> (*build)(const LinkInputs& in);
};

// How the walk agrees across ranks: over the world group in a context.
class Agreement {
 public:
  virtual ~Agreement() = default;
  // Every rank throws if any rank has an error (see base/agreement.hpp agree; `what` names it).
  virtual void all_or_none(const char* what, const std::optional<Error>& local) = 0;
  // Whether `yes` holds on every rank.
  virtual bool everywhere(bool yes) = 0;
};

struct Chosen {
  const TransportEntry* entry = nullptr;
  std::unique_ptr<Link> link;
};

// Collective over the agreement's ranks and the groups the entries set up; every rank chooses the
// same entry.
Chosen walk_transport_table(const SelectionFacts& facts, const LinkInputs& inputs,
                            Agreement& agreement);

}  // namespace fsdp
