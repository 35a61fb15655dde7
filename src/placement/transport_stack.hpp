// A transport stack: what one entry of the transport table (transport_table.hpp) builds, the
// context's transport and whatever comes with it (the stack of its delegate entry, whose transport
// takes what this one does not carry; scratch, staging memory, node-shared storage). The backend
// holds exactly one, so nothing else in the backend depends on which transport was chosen.
#pragma once

#include <cstdint>
#include <memory>

#include "base/memory_accounting.hpp"
#include "core/memory_and_transport.hpp"
#include "core/process_groups.hpp"
#include "memory/memory_space.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/unsharded_storage.hpp"
#include "transport/transport.hpp"
#include "transport/transport_options.hpp"

namespace fsdp {

class TransportStack;
struct StackInputs;
using StackBuilder = std::unique_ptr<TransportStack> (*)(const StackInputs& in);

// What every entry is built from: the groups and options of the context, and the memory the
// placement set up before any transport (host memory, or the CUDA device's).
struct StackInputs {
  const PlacementRequest& request;
  const MpiTransportOptions& mpi;
  const ProcessGroups& groups;
  const Topology& topo;
  MemoryAccounting& accounting;
  MemorySpace& buffers;  // the placement's memory for full gradients and unsharded parameters
  int device;            // the CUDA device, or -1
  // The entry is tried (FSDP_TRANSPORT_AUTO), not asked for: what it cannot serve at run time
  // (node shared memory exhausted) goes to its delegate, MPI, instead of failing.
  bool tried = false;
  // The builder of the entry's delegate entry (the table's "delegate" column), for entries whose
  // transport is a DelegatingTransport; build it with build_delegate.
  StackBuilder delegate = nullptr;
  // Where the stack's communication scratch lives; nullptr: `buffers`. (The staged entry's
  // delegate keeps its scratch in pinned host memory.)
  MemorySpace* scratch = nullptr;
};

class TransportStack {
 public:
  virtual ~TransportStack() = default;
  virtual Transport& transport() = 0;
  // Where full gradients and pooled buffers live: the placement's buffers unless the transport
  // needs its peers to read them (the shared-memory transport's node arena).
  virtual MemorySpace& buffers() = 0;
  // Where unsharded parameters live; `pool` is the context's pool over buffers().
  virtual std::unique_ptr<UnshardedStorage> make_storage(BufferPool& pool) = 0;
  // Frees communication scratch (fsdp_trim_pool).
  virtual void trim() = 0;
  // Calls to the allocators of the memory this stack owns (fsdp_memory_stats).
  virtual uint64_t allocation_calls() const = 0;
  // An entry the table may try (FSDP_TRANSPORT_AUTO): whether it is worth using on this rank.
  // The entry is used only when it is on every rank.
  virtual bool worth_it() const { return true; }
};

// The stack of the delegate entry `in` names, its scratch in `scratch` (nullptr: in.buffers); it
// must outlive the stack whose transport delegates to it.
std::unique_ptr<TransportStack> build_delegate(const StackInputs& in,
                                               MemorySpace* scratch = nullptr);

// The builders of the table's entries (transport_stacks.cpp). Each is collective over the groups it
// sets up and throws on this rank alone; the table agrees on the outcome.
std::unique_ptr<TransportStack> make_nccl_stack(const StackInputs& in);
std::unique_ptr<TransportStack> make_zero_copy_stack(const StackInputs& in);
std::unique_ptr<TransportStack> make_shm_stack(const StackInputs& in);
std::unique_ptr<TransportStack> make_staged_stack(const StackInputs& in);
std::unique_ptr<TransportStack> make_mpi_stack(const StackInputs& in);

}  // namespace fsdp
