// C entry points for GPUs: device count, placement, the caller's stream, and abort.
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "memory/cuda/cuda_api.hpp"

using fsdp::Context;
using fsdp::Errc;
using fsdp::fail;

// The core's enums mirror the ABI's without including it.
static_assert(static_cast<int>(fsdp::MemoryPlace::Host) == FSDP_MEMORY_HOST, "");
static_assert(static_cast<int>(fsdp::MemoryPlace::Cuda) == FSDP_MEMORY_CUDA, "");
static_assert(static_cast<int>(fsdp::TransportKind::Auto) == FSDP_TRANSPORT_AUTO, "");
static_assert(static_cast<int>(fsdp::TransportKind::Mpi) == FSDP_TRANSPORT_MPI, "");
static_assert(static_cast<int>(fsdp::TransportKind::Nccl) == FSDP_TRANSPORT_NCCL, "");
static_assert(static_cast<int>(fsdp::TransportKind::Shm) == FSDP_TRANSPORT_SHM, "");
static_assert(static_cast<int>(fsdp::TransportKind::ShmZeroCopy) == FSDP_TRANSPORT_SHM_ZERO_COPY,
              "");

namespace fsdp::capi::body {

void fsdp_cuda_device_count(int* count) {
  *count = fsdp::cuda::device_count();
}

void fsdp_context_placement(fsdp::Context& ctx, fsdp_memory_space_t* memory_space, int* device,
                            int* cpu_offload, fsdp_transport_t* transport) {
  const fsdp::Placement& p = ctx.placement();
  if (memory_space) *memory_space = static_cast<fsdp_memory_space_t>(p.memory);
  if (device) *device = p.device;
  if (cpu_offload) *cpu_offload = p.cpu_offload ? 1 : 0;
  if (transport) *transport = static_cast<fsdp_transport_t>(p.transport);
}

void fsdp_set_stream(fsdp::Context& c, void* stream) {
  if (c.placement().memory != fsdp::MemoryPlace::Cuda)
    fail(Errc::Unsupported,
         "ctx: a host-memory context has no stream to order against (create it with "
         "cfg->memory_space = FSDP_MEMORY_CUDA)");
  c.memory().take_from_caller();  // the old stream's work comes first
  fsdp::cuda::set_caller_stream(c.memory(), stream);
}

void fsdp_abort(fsdp::Context& ctx) {
  ctx.abort();
}

}  // namespace fsdp::capi::body
