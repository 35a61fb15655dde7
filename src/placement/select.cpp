#include "placement/select.hpp"

#include <optional>
#include <string>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "memory/cuda/cuda_api.hpp"
#include "memory/host/host_memory_space.hpp"
#include "placement/device_identity.hpp"
#include "placement/table_backend.hpp"

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

// Collective over the world group: every rank sets up its device, or every rank throws.
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
  const StackInputs inputs{request, mpi, groups, topo, accounting, *memory.buffers, memory.device};
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
