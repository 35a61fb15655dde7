// Checksums of datasets spread over ranks: each rank checksums the element ranges it holds, and
// the ranges of all ranks, sorted and combined with crc32c_combine, give each dataset's CRC-32C
// without moving any data. Used by saves (to write the checksums), loads and fsdp-ckpt (to check
// them).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/format.hpp"

namespace fsdp::ckpt {

// One rank's CRC of elements [first, first + count) of dataset `dataset`.
struct PartialCrc {
  uint64_t dataset, first, count;
  uint32_t crc, pad = 0;
};

struct DatasetExtent {
  std::string name;  // for messages
  uint64_t numel = 0;
  std::size_t element_size = 1;
};

// Collective over comm: every rank gets every dataset's CRC. The ranges must tile each dataset
// exactly (a gap, an overlap or a shortfall is a bug: Errc::Internal).
std::vector<uint32_t> combined_checksums(MPI_Comm comm, const std::vector<PartialCrc>& local,
                                         const std::vector<DatasetExtent>& datasets);

// Collective over comm: the labels of datasets (label, stored checksum in DatasetInfo::crc) whose
// checksum, combined from every rank's partial ones, differs from the stored one, each with both
// values; the same list on every rank.
std::vector<std::string> failed_checksums(
    MPI_Comm comm, const std::vector<std::pair<std::string, DatasetInfo>>& datasets,
    const std::vector<PartialCrc>& local);

}  // namespace fsdp::ckpt
