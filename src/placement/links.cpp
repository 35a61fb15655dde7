// The builders of the transport table's entries: each makes its transport and what that transport
// needs, and owns them in the order they must be torn down (what a transport uses outlives it).
#include <string>

#include "base/environment.hpp"
#include "memory/cuda/cuda_api.hpp"
#include "placement/link.hpp"
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

// MPI over host memory: what the shared-memory and staged transports hand the rest to.
// `scratch_memory`: where its scratch lives (the staged transport's: pinned staging memory).
class MpiLink : public Link {
 public:
  MpiLink(MemorySpace& scratch_memory, const LinkInputs& in)
      : buffers_(in.buffers), scratch_(scratch_memory, in.accounting), mpi_(scratch_, in.mpi) {}
  Transport& transport() override { return mpi_; }
  MemorySpace& buffers() override { return buffers_; }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool& pool) override {
    return std::make_unique<PooledStorage>(pool);
  }
  void trim() override { scratch_.release(); }
  uint64_t allocation_calls() const override { return 0; }  // its memory is the placement's

 protected:
  MpiTransport& mpi() { return mpi_; }

 private:
  MemorySpace& buffers_;
  Scratch scratch_;
  MpiTransport mpi_;
};

// Node shared memory for the shard group, MPI for the rest. `zero_copy`: units whose shards can
// stay in place keep them in a node-shared block for life (one node only).
class ShmLink final : public MpiLink {
 public:
  ShmLink(const LinkInputs& in, bool zero_copy)
      : MpiLink(in.buffers, in),
        shm_(in.groups.shard(), in.topo.node_leader, mpi(), in.accounting,
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
    MpiLink::trim();
    shm_.release_scratch();
  }
  uint64_t allocation_calls() const override {
    return shm_.allocation_calls() + shm_.arena_memory().allocation_calls();
  }
  // Worth it with a node peer in the shard group.
  bool worth_it() const override { return shm_.team().size() > 1; }

 private:
  shm::ShmTransport shm_;
  MemoryAccounting& accounting_;
  const bool zero_copy_;
};

// Device memory through pinned host buffers and MPI.
class StagedLink final : public Link {
 public:
  explicit StagedLink(const LinkInputs& in)
      : staging_(cuda::make_pinned_memory(in.device)),
        mpi_(*staging_, in),
        staged_(in.buffers, *staging_, in.accounting, mpi_.transport(), cuda::mpi_supports_cuda()) {
  }
  Transport& transport() override { return staged_; }
  MemorySpace& buffers() override { return mpi_.buffers(); }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool& pool) override {
    return mpi_.make_storage(pool);
  }
  void trim() override { mpi_.trim(); }
  uint64_t allocation_calls() const override { return staging_->allocation_calls(); }

 private:
  std::unique_ptr<MemorySpace> staging_;
  MpiLink mpi_;  // its scratch in staging memory
  StagedTransport staged_;
};

class NcclLink final : public Link {
 public:
  explicit NcclLink(const LinkInputs& in)
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

std::unique_ptr<Link> make_nccl_link(const LinkInputs& in) {
  return std::make_unique<NcclLink>(in);
}
std::unique_ptr<Link> make_zero_copy_link(const LinkInputs& in) {
  return std::make_unique<ShmLink>(in, /*zero_copy=*/true);
}
std::unique_ptr<Link> make_shm_link(const LinkInputs& in) {
  return std::make_unique<ShmLink>(in, /*zero_copy=*/false);
}
std::unique_ptr<Link> make_staged_link(const LinkInputs& in) {
  return std::make_unique<StagedLink>(in);
}
std::unique_ptr<Link> make_mpi_link(const LinkInputs& in) {
  return std::make_unique<MpiLink>(in.buffers, in);
}

}  // namespace fsdp
