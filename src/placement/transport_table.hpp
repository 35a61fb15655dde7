// The transports a context can use, as a table (NCCL's ncclTransports[]): each entry says whether
// it serves a placement and builds itself. Selection walks the table once, in order; the first
// entry that serves is built. An entry that is only tried (FSDP_TRANSPORT_AUTO's shared memory)
// and cannot be built, or is not worth it, on some rank gives way to the next entry, on every
// rank: falling back is choosing the next entry. An entry asked for (FSDP_TRANSPORT_SHM, _NCCL)
// that cannot be built is an error on every rank.
//
// Falling back at run time is delegation (transport/delegating_transport.hpp): an entry may name
// a delegate entry, which its stack builds (build_delegate) and owns; the entry's transport carries
// what it can and hands every other operation to the delegate's transport: other groups,
// inter-node steps, the bytes it stages, and what node shared memory cannot hold.
//
//   entry       memory  serves                                           resolves to    delegate
//   nccl        CUDA    asked for (an error if NCCL is missing or ranks  NCCL           -
//                       share a GPU); any request but MPI when NCCL is
//                       built and no two ranks share a GPU
//   zero-copy   host    asked for                                        SHM_ZERO_COPY  mpi
//   shm         host    asked for; tried under AUTO (and NCCL, which     SHM            mpi
//                       means AUTO for host memory)
//   staged      CUDA    always (MPI through pinned host buffers)         MPI            mpi
//   mpi         host    always                                           MPI            -
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "base/error.hpp"
#include "core/memory_and_transport.hpp"
#include "placement/transport_stack.hpp"

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
  StackBuilder build;
  // The entry whose transport takes what this one's does not carry; nullptr: none.
  const char* delegate;
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
  std::unique_ptr<TransportStack> stack;
};

// Collective over the agreement's ranks and the groups the entries set up; every rank chooses the
// same entry.
Chosen walk_transport_table(const SelectionFacts& facts, const StackInputs& inputs,
                            Agreement& agreement);

}  // namespace fsdp
