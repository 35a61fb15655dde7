// GPUs told apart by UUID, not ordinal (placement/device_identity): with one GPU per rank through
// CUDA_VISIBLE_DEVICES every rank sees its GPU as device 0, and the NCCL transport must still be
// chosen; two ranks on one GPU must still be found. Fake UUIDs stand in for devices here; on a GPU
// machine test_gpu_training runs the real ones.
#include <mpi.h>

#include <cstdio>

#include "placement/device_identity.hpp"

using namespace fsdp;

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAILED: %s\n", what);
}

DeviceUuid uuid(int n) {
  DeviceUuid id{};
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(0xA0 + n + i);
  return id;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Group world;
  world.comm = MPI_COMM_WORLD;
  MPI_Comm_rank(world.comm, &world.rank);
  MPI_Comm_size(world.comm, &world.size);
  // Every rank its own GPU (each would call it ordinal 0): nobody shares.
  check(ranks_sharing_a_device(world, uuid(world.rank)) == std::make_pair(-1, -1),
        "one GPU per rank is not shared");
  // The first and the last rank on one GPU.
  const int last = world.size - 1;
  const DeviceUuid mine = world.rank == last ? uuid(0) : uuid(world.rank);
  const std::pair<int, int> want =
      world.size > 1 ? std::make_pair(0, last) : std::make_pair(-1, -1);
  check(ranks_sharing_a_device(world, mine) == want, "ranks 0 and the last share a GPU");
  // The first pair, in rank order.
  check(first_pair_sharing({uuid(1), uuid(2), uuid(2), uuid(1)}) == std::make_pair(0, 3),
        "the first pair in rank order");
  check(first_pair_sharing({}) == std::make_pair(-1, -1), "no ranks, no pair");
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, world.comm);
  if (world.rank == 0) std::printf(all ? "FAILED\n" : "OK: devices told apart by UUID\n");
  MPI_Finalize();
  return all ? 1 : 0;
}
