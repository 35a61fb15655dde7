#include "placement/select.hpp"

#include <optional>
#include <string>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "memory/cuda/cuda_api.hpp"
#include "memory/host/host_memory_space.hpp"
#include "placement/device_identity.hpp"
#include "placement/transport_table.hpp"

namespace fsdp {
namespace {

class WorldAgreement final : public Agreement {
 public:
  explicit WorldAgreement(const Group& world) : world_(world) {}
  void all_or_none(const char* what, const std::optional<Error>& local) override {
    agree(world_, what, 0, local);
  }
  bool everywhere(bool yes) override {
    int all = yes ? 1 : 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, world_.comm), "MPI_Allreduce");
    return all != 0;
  }

 private:
  const Group& world_;
};

// The placement's memory: plain host memory, or the CUDA device (and pinned host memory for the
// shards under CPU offload). Collective over the world group: every rank sets up its device, or
// every rank throws.
struct PlacementMemory {
  std::unique_ptr<MemorySpace> buffers, offload;  // offload: the shards' memory, or nullptr
  int device = -1;
};

PlacementMemory set_up_memory(const PlacementRequest& request, const Group& world,
                              const Topology& topo) {
  PlacementMemory m;
  if (request.memory == MemoryPlace::Host) {
    m.buffers = std::make_unique<HostMemorySpace>();
    return m;
  }
  const std::optional<Error> local = attempt([&] {
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
    m.device = request.device >= 0 ? request.device : topo.node_rank % count;
    m.buffers = cuda::make_device_memory(m.device);
    if (request.cpu_offload) m.offload = cuda::make_pinned_memory(m.device);
  });
  agree(world, "CUDA device setup", 0, local);
  return m;
}

// The placement's memory and the link the table chose; every member is set.
class TableBackend final : public Backend {
 public:
  TableBackend(const Placement& placement, std::unique_ptr<MemorySpace> host,
               PlacementMemory memory, Chosen chosen, MemoryAccounting& accounting)
      : placement_(placement),
        host_(std::move(host)),
        memory_(std::move(memory)),
        link_(std::move(chosen.link)),
        pool_(std::make_unique<BufferPool>(link_->buffers(), accounting)),
        storage_(link_->make_storage(*pool_)) {
    placement_.transport = chosen.entry->resolved;
  }
  ~TableBackend() override;

  const Placement& placement() const override { return placement_; }
  MemorySpace& buffers() override { return link_->buffers(); }
  MemorySpace& shards() override { return memory_.offload ? *memory_.offload : *memory_.buffers; }
  MemorySpace& host() override { return *host_; }
  Transport& transport() override { return link_->transport(); }
  UnshardedStorage& unsharded() override { return *storage_; }
  BufferPool& pool() override { return *pool_; }
  void trim() override {
    memory_.buffers->synchronize();  // no queued device copy may still use what is freed
    pool_->trim();
    link_->trim();
  }
  void before_cpu_touches_shards() override {
    if (memory_.offload) memory_.buffers->synchronize();
  }
  uint64_t allocation_calls() const override {
    uint64_t n = host_->allocation_calls() + memory_.buffers->allocation_calls();
    if (memory_.offload) n += memory_.offload->allocation_calls();
    return n + link_->allocation_calls();
  }

 private:
  Placement placement_;
  std::unique_ptr<MemorySpace> host_;
  PlacementMemory memory_;
  std::unique_ptr<Link> link_;
  std::unique_ptr<BufferPool> pool_;  // after the memory spaces: freed before them
  std::unique_ptr<UnshardedStorage> storage_;
};

TableBackend::~TableBackend() {
  storage_.reset();
  pool_.reset();  // before the memory spaces its buffers came from
  try {
    memory_.buffers->synchronize();  // nothing queued may outlive the memory it uses
  } catch (...) {
  }
  link_.reset();
}

}  // namespace

std::unique_ptr<Backend> make_backend(const PlacementRequest& request,
                                      const MpiTransportOptions& mpi, const ProcessGroups& groups,
                                      const Topology& topo, MemoryAccounting& accounting) {
  const Group& world = groups.world();
  auto host = std::make_unique<HostMemorySpace>();
  PlacementMemory memory = set_up_memory(request, world, topo);
  SelectionFacts facts;
  facts.memory = request.memory;
  facts.requested = request.transport;
  if (request.memory == MemoryPlace::Cuda) {
    facts.nccl_built = cuda::built_with_nccl();
    // GPUs are told apart by UUID: under CUDA_VISIBLE_DEVICES every rank may see its GPU as 0.
    facts.shared_gpu = ranks_sharing_a_device(world, cuda::device_uuid(memory.device));
  }
  const LinkInputs inputs{request, mpi, groups, topo, accounting, *memory.buffers, memory.device};
  WorldAgreement agreement(world);
  Chosen chosen = walk_transport_table(facts, inputs, agreement);
  Placement placement;
  placement.memory = request.memory;
  placement.device = memory.device;
  placement.cpu_offload = request.cpu_offload;
  return std::make_unique<TableBackend>(placement, std::move(host), std::move(memory),
                                        std::move(chosen), accounting);
}

}  // namespace fsdp
