// The /index dataset: one table row per data dataset (its path, dtype, shape, file offset,
// checksum and step count), written at save. A load reads this one dataset instead of opening
// every dataset and its attributes: with 2,000 parameters and AdamW state that walk is 6,000
// object opens, longer than reading the data itself. The datasets and their attributes stay the
// authority: a reader uses the index only after checking that it still describes the file
// (read_index), and walks the objects otherwise.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.hpp"

namespace fsdp::ckpt {

struct IndexRow {
  std::string path;  // e.g. "/model/encoder.weight", "/optimizers/0/exp_avg/encoder.weight"
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of the contiguous data, in bytes from the file's start
  uint32_t crc = 0;     // CRC-32C of the data
  int64_t step = -1;    // the dataset's "step" attribute; -1 without one
};

// Creates and writes /index in an open file; collective when the file is open in parallel
// (every writer passes the same rows).
void write_index(hid_t file, const std::vector<IndexRow>& rows);

// The rows of /index, or nothing when the file has none or it cannot be trusted: its own
// checksum fails, or `expected_rows` (the number of datasets the groups link to) differs.
std::optional<std::vector<IndexRow>> read_index(hid_t file, std::size_t expected_rows);

}  // namespace fsdp::ckpt
