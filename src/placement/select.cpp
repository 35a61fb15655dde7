// make_backend: the one place that knows the concrete transports and memory spaces, and picks
// them from the placement asked for (see core/backend.hpp for what each placement gets).
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "base/agreement.hpp"
#include "base/environment.hpp"
#include "base/mpi_check.hpp"
#include "core/backend.hpp"
#include "memory/cuda/cuda_api.hpp"
#include "memory/host/host_memory_space.hpp"
#include "placement/device_identity.hpp"
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
  const char* v = env(Env::Debug);
  return v && std::string(v) != "0";
#endif
}

class SelectedBackend final : public Backend {
 public:
  SelectedBackend(const PlacementRequest& request, const MpiTransportOptions& mpi,
                  const ProcessGroups& groups, const Topology& topo, MemoryAccounting& accounting);
  ~SelectedBackend() override;

  const Placement& placement() const override { return placement_; }
  MemorySpace& buffers() override { return shm_ ? shm_->arena_memory() : *buffers_; }
  MemorySpace& shards() override { return shards_ ? *shards_ : *buffers_; }
  MemorySpace& host() override { return *host_; }
  Transport& transport() override {
    if (device_transport_) return *device_transport_;
    if (shm_) return *shm_;
    return *host_transport_;
  }
  UnshardedStorage& unsharded() override {
    return node_storage_ ? static_cast<UnshardedStorage&>(*node_storage_) : *pooled_;
  }
  BufferPool& pool() override { return *pool_; }
  void trim() override {
    buffers_->synchronize();  // no queued device copy may still use what is freed
    pool_->trim();
    transport_scratch_->release();
    if (shm_) shm_->release_scratch();
  }
  void before_cpu_touches_shards() override {
    if (shards_) buffers_->synchronize();
  }
  uint64_t allocation_calls() const override {
    uint64_t n = 0;
    for (const auto* m : {host_.get(), buffers_.get(), shards_.get(), staging_.get()})
      if (m) n += m->allocation_calls();
    if (shm_) n += shm_->allocation_calls() + shm_->arena_memory().allocation_calls();
    return n;
  }

 private:
  void choose_host_transport(const PlacementRequest& request, const ProcessGroups& groups,
                             const Topology& topo, MemoryAccounting& accounting);
  void choose_device_transport(const PlacementRequest& request, const MpiTransportOptions& mpi,
                               const ProcessGroups& groups, const Topology& topo,
                               MemoryAccounting& accounting);

  Placement placement_;
  std::unique_ptr<MemorySpace> host_, buffers_, shards_, staging_;
  std::unique_ptr<Scratch> transport_scratch_;
  std::unique_ptr<MpiTransport> host_transport_;
  std::unique_ptr<Transport> device_transport_;
  std::unique_ptr<shm::ShmTransport> shm_;
  std::unique_ptr<BufferPool> pool_;  // after the memory spaces: freed before them
  std::unique_ptr<PooledStorage> pooled_;
  std::unique_ptr<shm::NodeStorage> node_storage_;
};

// Host memory: the shared-memory transport when the shard group has ranks on a common node (or
// when asked for), MPI otherwise. Every rank ends with the same choice. (FSDP_TRANSPORT=nccl in
// the environment reaches here for host contexts, and means what auto means for them.)
void SelectedBackend::choose_host_transport(const PlacementRequest& request,
                                            const ProcessGroups& groups, const Topology& topo,
                                            MemoryAccounting& accounting) {
  const Group& world = groups.world();
  if (request.transport == TransportKind::Mpi) return;
  const bool zero_copy = request.transport == TransportKind::ShmZeroCopy;
  const bool forced = request.transport == TransportKind::Shm || zero_copy;
  const std::optional<Error> failed = attempt([&] {
    shm_ = std::make_unique<shm::ShmTransport>(groups.shard(), topo.node_leader, *host_transport_,
                                               accounting, protect_shared_parameters(),
                                               /*fall_back=*/!forced);
  });
  if (forced) {
    agree(world,
          zero_copy
              ? "shared-memory transport setup (cfg->transport = FSDP_TRANSPORT_SHM_ZERO_COPY)"
              : "shared-memory transport setup (cfg->transport = FSDP_TRANSPORT_SHM)",
          0, failed);
  } else {  // AUTO: a failed setup means MPI instead
    // Worth it with a node peer in the shard group; used only when every group can.
    int usable = shm_ && shm_->team().size() > 1 ? 1 : 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &usable, 1, MPI_INT, MPI_MIN, world.comm),
              "MPI_Allreduce");
    if (!usable) shm_.reset();  // collective over the shard group, whose members all built it
  }
  if (!shm_) return;
  placement_.transport = zero_copy ? TransportKind::ShmZeroCopy : TransportKind::Shm;
  // Zero-copy storage needs the shard group on one node (the resident arena).
  node_storage_ = std::make_unique<shm::NodeStorage>(
      shm_->team(), shm_->slots(), zero_copy ? shm_->resident_storage() : nullptr);
}

SelectedBackend::SelectedBackend(const PlacementRequest& request, const MpiTransportOptions& mpi,
                                 const ProcessGroups& groups, const Topology& topo,
                                 MemoryAccounting& accounting) {
  host_ = std::make_unique<HostMemorySpace>();
  placement_.memory = request.memory;
  placement_.cpu_offload = request.cpu_offload;
  if (request.memory == MemoryPlace::Host) {
    buffers_ = std::make_unique<HostMemorySpace>();
    transport_scratch_ = std::make_unique<Scratch>(*buffers_, accounting);
    host_transport_ = std::make_unique<MpiTransport>(*transport_scratch_, mpi);
    placement_.transport = TransportKind::Mpi;
    choose_host_transport(request, groups, topo, accounting);
  } else {
    choose_device_transport(request, mpi, groups, topo, accounting);
  }
  pool_ = std::make_unique<BufferPool>(buffers(), accounting);
  pooled_ = std::make_unique<PooledStorage>(*pool_);
}

void SelectedBackend::choose_device_transport(const PlacementRequest& request,
                                              const MpiTransportOptions& mpi,
                                              const ProcessGroups& groups, const Topology& topo,
                                              MemoryAccounting& accounting) {
  const Group& world = groups.world();
  std::optional<Error> local = attempt([&] {
    if (!cuda::built_with_cuda())
      fail(Errc::Unsupported,
           "cfg->memory_space = FSDP_MEMORY_CUDA: this libfsdp was built "
           "without CUDA (configure with FSDP_ENABLE_CUDA=ON and a toolkit)");
    const int count = cuda::device_count();
    if (count == 0)
      fail(Errc::Unsupported,
           "cfg->memory_space = FSDP_MEMORY_CUDA: no CUDA device is visible to "
           "world rank " +
               std::to_string(world.rank) + " (check CUDA_VISIBLE_DEVICES and the driver)");
    if (request.device >= count)
      fail(Errc::InvalidArgument, "cfg->device = " + std::to_string(request.device) +
                                      ": world rank " + std::to_string(world.rank) + " sees " +
                                      std::to_string(count) + " CUDA device(s)");
    placement_.device = request.device >= 0 ? request.device : topo.node_rank % count;
    buffers_ = cuda::make_device_memory(placement_.device);
    if (request.cpu_offload) shards_ = cuda::make_pinned_memory(placement_.device);
  });
  agree(world, "CUDA device setup", 0, local);

  // NCCL refuses two ranks on one GPU; every rank sees the same list, so all decide alike. GPUs
  // are told apart by UUID: under CUDA_VISIBLE_DEVICES every rank may see its own GPU as 0.
  const std::pair<int, int> shared =
      ranks_sharing_a_device(world, cuda::device_uuid(placement_.device));
  bool nccl = false;
  local = attempt([&] {
    if (request.transport == TransportKind::Nccl) {
      if (!cuda::built_with_nccl())
        fail(Errc::Unsupported,
             "cfg->transport = FSDP_TRANSPORT_NCCL: this libfsdp was built without NCCL");
      if (shared.first >= 0)
        fail(Errc::Unsupported,
             "cfg->transport = FSDP_TRANSPORT_NCCL: world ranks " + std::to_string(shared.first) +
                 " and " + std::to_string(shared.second) +
                 " use the same GPU, which NCCL "
                 "refuses; give each rank its own GPU or use FSDP_TRANSPORT_MPI");
      nccl = true;
    } else if (request.transport == TransportKind::Auto ||
               request.transport == TransportKind::Shm ||
               request.transport == TransportKind::ShmZeroCopy) {  // FSDP_TRANSPORT, for host
      nccl = cuda::built_with_nccl() && shared.first < 0;
    }
    if (!nccl) staging_ = cuda::make_pinned_memory(placement_.device);
  });
  agree(world, "transport selection", 0, local);

  if (nccl) {
    transport_scratch_ = std::make_unique<Scratch>(*host_, accounting);  // unused by NCCL
    local = attempt([&] {
      device_transport_ = cuda::make_nccl_transport(*buffers_, groups.shard(), groups.replicate());
    });
    agree(world, "NCCL communicator setup", 0, local);
    placement_.transport = TransportKind::Nccl;
  } else {
    transport_scratch_ = std::make_unique<Scratch>(*staging_, accounting);
    host_transport_ = std::make_unique<MpiTransport>(*transport_scratch_, mpi);
    device_transport_ = std::make_unique<StagedTransport>(
        *buffers_, *staging_, accounting, *host_transport_, cuda::mpi_supports_cuda());
    placement_.transport = TransportKind::Mpi;
  }
}

SelectedBackend::~SelectedBackend() {
  node_storage_.reset();
  pooled_.reset();
  pool_.reset();  // before the memory spaces its buffers came from
  if (buffers_) {
    try {
      buffers_->synchronize();  // nothing queued may outlive the memory it uses
    } catch (...) {
    }
  }
  device_transport_.reset();
  shm_.reset();
  host_transport_.reset();
  transport_scratch_.reset();
}

}  // namespace

std::unique_ptr<Backend> make_backend(const PlacementRequest& request,
                                      const MpiTransportOptions& mpi, const ProcessGroups& groups,
                                      const Topology& topo, MemoryAccounting& accounting) {
  return std::make_unique<SelectedBackend>(request, mpi, groups, topo, accounting);
}

}  // namespace fsdp
