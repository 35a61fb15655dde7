#include "placement/device_identity.hpp"

#include "base/mpi_check.hpp"

namespace fsdp {

std::pair<int, int> first_pair_sharing(const std::vector<DeviceUuid>& all) {
  const int n = static_cast<int>(all.size());
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (all[static_cast<std::size_t>(a)] == all[static_cast<std::size_t>(b)]) return {a, b};
  return {-1, -1};
}

std::pair<int, int> ranks_sharing_a_device(const Group& world, const DeviceUuid& mine) {
  std::vector<DeviceUuid> all(static_cast<std::size_t>(world.size));
  mpi_check(MPI_Allgather(mine.data(), 16, MPI_UNSIGNED_CHAR, all.data(), 16, MPI_UNSIGNED_CHAR,
                          world.comm),
            "MPI_Allgather");
  return first_pair_sharing(all);
}

}  // namespace fsdp
