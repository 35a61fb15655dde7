// fsdp_checkpoint_verify: every dataset's CRC-32C recomputed from the file, and the index checked
// against the datasets it lists (fsdp-ckpt verify).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

namespace fsdp::ckpt {

// A report's lines (without newlines) and a scan's progress (bytes done and in all, summed over
// the ranks as rank 0's share times their number), each called on rank 0 alone; either may be
// empty.
struct ReportSink {
  std::function<void(const std::string&)> line;
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Collective over comm: false when a checksum fails or /index disagrees with the datasets (the
// report names each), the same on every rank. Errors (a missing file, not a checkpoint) throw on
// every rank.
bool verify_checkpoint(MPI_Comm comm, const std::string& path, const ReportSink& out);

}  // namespace fsdp::ckpt
