#include "checkpoint/from_rank0.hpp"

#include <mutex>
#include <vector>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "checkpoint/catalog_wire.hpp"
#include "checkpoint/h5util.hpp"

namespace fsdp::ckpt {

std::string broadcast_string(MPI_Comm comm, std::string s) {
  uint64_t n = s.size();
  mpi_check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm), "MPI_Bcast");
  s.resize(n);
  mpi_check(MPI_Bcast(s.data(), static_cast<int>(n), MPI_BYTE, 0, comm), "MPI_Bcast");
  return s;
}

Catalog shared_catalog(MPI_Comm comm, const std::string& path, CatalogSource source) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<char> bytes;
  agree_on(comm, [&] {
    if (rank != 0) return;
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    bytes = serialize(read_catalog(path, source));
  });
  const std::string s = broadcast_string(comm, std::string(bytes.begin(), bytes.end()));
  return deserialize(std::vector<char>(s.begin(), s.end()));
}

}  // namespace fsdp::ckpt
