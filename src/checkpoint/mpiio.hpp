// Writing many (file range, memory) pieces with collective MPI-IO: one MPI_File_write_at_all
// per round for all of a rank's pieces, whatever the number of datasets they belong
// to. Rounds bound the bytes one call moves (MPI counts are int) and the staging memory of
// pieces that are produced on the fly; every rank makes the same number of calls.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fsdp::ckpt {

struct IoPiece {
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
  void* memory = nullptr;  // the source (unless produce is set)
  // Fills `bytes` bytes starting at byte `first` of the piece into `out` (conversion
  // on import); the piece is then staged through a bounded buffer instead of read from memory.
  std::function<void(uint64_t first, uint64_t bytes, void* out)> produce;
};

struct IoOptions {
  bool collective = true;  // false: independent MPI_File_write_at (for measuring the difference)
  uint64_t round_bytes = uint64_t{256} << 20;
};

// Collective over comm (every rank, even one with no pieces). Throws Errc::Io naming the file.
void write_pieces(MPI_Comm comm, const std::string& path, std::vector<IoPiece> pieces,
                  const IoOptions& options);

// The options the environment asks for: FSDP_CKPT_DATA_IO=collective|independent.
IoOptions io_options_from_environment();

}  // namespace fsdp::ckpt
