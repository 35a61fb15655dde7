// Where a context keeps its memory and what moves its data (fsdp_config_t.memory_space, device,
// cpu_offload, transport): what was asked for, and what the context resolved it to.
#pragma once

namespace fsdp {

// Values equal fsdp_memory_space_t's and fsdp_transport_t's (checked in src/capi).
enum class MemoryPlace : int { Host = 0, Cuda = 1 };
enum class TransportKind : int { Auto = 0, Mpi = 1, Nccl = 2, Shm = 3, ShmZeroCopy = 4 };

struct PlacementRequest {
  MemoryPlace memory = MemoryPlace::Host;
  int device = -1;  // -1: node rank modulo the node's device count
  bool cpu_offload = false;
  TransportKind transport = TransportKind::Auto;
};

struct Placement {
  MemoryPlace memory = MemoryPlace::Host;
  int device = -1;  // -1 for host memory
  bool cpu_offload = false;
  TransportKind transport = TransportKind::Mpi;  // never Auto once resolved
};

}  // namespace fsdp
