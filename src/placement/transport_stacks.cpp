// The builders of the transport table's entries: each makes its transport and what that transport
// needs, and owns them in the order they must be torn down (what a transport uses outlives it).
#include <string>

#include "base/environment.hpp"
#include "memory/cuda/cuda_api.hpp"
#include "placement/transport_stack.hpp"
#include "runtime/pooled_storage.hpp"
#include "runtime/scratch.hpp"
#include "transport/mpi/mpi_transport.hpp"
#include "transport/nccl/nccl_factory.hpp"
#include "transport/shm/node_storage.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/staged/staged_transport.hpp"

namespace fsdp {
namespace {

// Debug mode makes node-shared parameters read-only to the caller (a write faults where it
// happens): on in builds without NDEBUG, and with FSDP_DEBUG set to anything but 0.
bool protect_shared_parameters() {
#ifndef NDEBUG
  return true;
#else
  return debug_env();
#endif
}

// MPI over host memory: the delegate of the shared-memory and staged entries.
class MpiStack final : public TransportStack {
 public:
  explicit MpiStack(const StackInputs& in)
      : buffers_(in.buffers),
        scratch_(in.scratch ? *in.scratch : in.buffers, in.accounting),
        mpi_(scratch_, in.mpi) {}
  Transport& transport() override { return mpi_; }
  MemorySpace& buffers() override { return buffers_; }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool& pool) override {
    return std::make_unique<PooledStorage>(pool);
  }
  void trim() override { scratch_.release(); }
  uint64_t allocation_calls() const override { return 0; }  // its memory is the placement's

 private:
  MemorySpace& buffers_;
  Scratch scratch_;
  MpiTransport mpi_;
};

// Node shared memory for the shard group, the delegate (MPI) for the rest. `zero_copy`: units
// whose shards can stay in place keep them in a node-shared block for life (one node only).
class ShmStack final : public TransportStack {
 public:
  ShmStack(const StackInputs& in, bool zero_copy)
      : delegate_(build_delegate(in)),
        shm_(in.groups.shard(), in.topo.node_leader, delegate_->transport(), in.accounting,
             protect_shared_parameters(), /*tried=*/in.tried),
        accounting_(in.accounting),
        zero_copy_(zero_copy) {}
  Transport& transport() override { return shm_; }
  MemorySpace& buffers() override { return shm_.arena_memory(); }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool&) override {
    return std::make_unique<shm::NodeStorage>(
        shm_.team(), shm_.slots(), zero_copy_ ? shm_.resident_storage() : nullptr, accounting_);
  }
  void trim() override {
    delegate_->trim();
    shm_.release_scratch();
  }
  uint64_t allocation_calls() const override {
    return delegate_->allocation_calls() + shm_.allocation_calls() +
           shm_.arena_memory().allocation_calls();
  }
  // Worth it with a node peer in the shard group.
  bool worth_it() const override { return shm_.team().size() > 1; }

 private:
  std::unique_ptr<TransportStack> delegate_;  // outlives shm_
  shm::ShmTransport shm_;
  MemoryAccounting& accounting_;
  const bool zero_copy_;
};

// Device memory through pinned host buffers and the delegate (MPI), whose scratch is in the same
// pinned memory.
class StagedStack final : public TransportStack {
 public:
  explicit StagedStack(const StackInputs& in)
      : staging_(cuda::make_pinned_memory(in.device)),
        delegate_(build_delegate(in, staging_.get())),
        staged_(in.buffers, *staging_, in.accounting, delegate_->transport(),
                cuda::mpi_supports_cuda()) {}
  Transport& transport() override { return staged_; }
  MemorySpace& buffers() override { return delegate_->buffers(); }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool& pool) override {
    return delegate_->make_storage(pool);
  }
  void trim() override { delegate_->trim(); }
  uint64_t allocation_calls() const override {
    return staging_->allocation_calls() + delegate_->allocation_calls();
  }

 private:
  std::unique_ptr<MemorySpace> staging_;
  std::unique_ptr<TransportStack> delegate_;  // outlives staged_
  StagedTransport staged_;
};

class NcclStack final : public TransportStack {
 public:
  explicit NcclStack(const StackInputs& in)
      : buffers_(in.buffers),
        nccl_(cuda::make_nccl_transport(
            in.buffers, {&in.groups.shard(), &in.groups.replicate(), &in.groups.node_shard()})) {}
  Transport& transport() override { return *nccl_; }
  MemorySpace& buffers() override { return buffers_; }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool& pool) override {
    return std::make_unique<PooledStorage>(pool);
  }
  void trim() override {}
  uint64_t allocation_calls() const override { return 0; }

 private:
  MemorySpace& buffers_;
  std::unique_ptr<Transport> nccl_;
};

}  // namespace

std::unique_ptr<TransportStack> build_delegate(const StackInputs& in, MemorySpace* scratch) {
  if (!in.delegate) fail(Errc::Internal, "transport table: this entry names no delegate");
  StackInputs d = in;
  d.tried = false;  // the delegate serves whatever reaches it
  d.delegate = nullptr;
  d.scratch = scratch;
  return in.delegate(d);
}

std::unique_ptr<TransportStack> make_nccl_stack(const StackInputs& in) {
  return std::make_unique<NcclStack>(in);
}
std::unique_ptr<TransportStack> make_zero_copy_stack(const StackInputs& in) {
  return std::make_unique<ShmStack>(in, /*zero_copy=*/true);
}
std::unique_ptr<TransportStack> make_shm_stack(const StackInputs& in) {
  return std::make_unique<ShmStack>(in, /*zero_copy=*/false);
}
std::unique_ptr<TransportStack> make_staged_stack(const StackInputs& in) {
  return std::make_unique<StagedStack>(in);
}
std::unique_ptr<TransportStack> make_mpi_stack(const StackInputs& in) {
  return std::make_unique<MpiStack>(in);
}

}  // namespace fsdp
