#include "checkpoint/partial_checksums.hpp"

#include <algorithm>
#include <cstdio>

#include "base/crc32c.hpp"
#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp::ckpt {

std::vector<uint32_t> combined_checksums(MPI_Comm comm, const std::vector<PartialCrc>& local,
                                         const std::vector<DatasetExtent>& datasets) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int bytes = static_cast<int>(local.size() * sizeof(PartialCrc));
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(counts.size());
  mpi_check(MPI_Allgather(&bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, comm), "MPI_Allgather");
  long total = 0;
  for (int r = 0; r < size; ++r) displs[r] = static_cast<int>(total), total += counts[r];
  std::vector<PartialCrc> all(static_cast<std::size_t>(total) / sizeof(PartialCrc));
  mpi_check(MPI_Allgatherv(local.data(), bytes, MPI_BYTE, all.data(), counts.data(), displs.data(),
                           MPI_BYTE, comm),
            "MPI_Allgatherv");
  std::sort(all.begin(), all.end(), [](const PartialCrc& a, const PartialCrc& b) {
    return a.dataset != b.dataset ? a.dataset < b.dataset : a.first < b.first;
  });
  std::vector<uint32_t> crc(datasets.size(), 0);
  std::vector<uint64_t> covered(datasets.size(), 0);
  for (const PartialCrc& p : all) {
    if (p.count == 0) continue;  // an empty range: nothing to tile or combine
    const DatasetExtent& d = datasets[p.dataset];
    if (p.first != covered[p.dataset])
      fail(Errc::Internal, d.name + ": the ranks' ranges do not tile it at element " +
                               std::to_string(covered[p.dataset]));
    crc[p.dataset] = crc32c_combine(crc[p.dataset], p.crc, p.count * d.element_size);
    covered[p.dataset] += p.count;
  }
  for (std::size_t i = 0; i < datasets.size(); ++i)
    if (covered[i] != datasets[i].numel)
      fail(Errc::Internal, datasets[i].name + ": the ranks' ranges cover " +
                               std::to_string(covered[i]) + " of " +
                               std::to_string(datasets[i].numel) + " elements");
  return crc;
}

std::vector<std::string> failed_checksums(
    MPI_Comm comm, const std::vector<std::pair<std::string, DatasetInfo>>& datasets,
    const std::vector<PartialCrc>& local) {
  std::vector<DatasetExtent> extents;
  for (const auto& [label, d] : datasets) extents.push_back({label, d.numel, dtype_size(d.dtype)});
  const std::vector<uint32_t> crc = combined_checksums(comm, local, extents);
  std::vector<std::string> bad;
  for (std::size_t i = 0; i < datasets.size(); ++i)
    if (crc[i] != datasets[i].second.crc) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " (stored %08x, computed %08x)", datasets[i].second.crc,
                    crc[i]);
      bad.push_back(datasets[i].first + buf);
    }
  return bad;
}

}  // namespace fsdp::ckpt
