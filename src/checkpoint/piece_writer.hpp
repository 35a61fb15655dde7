// Writing many (file range, memory) pieces of one existing file from every rank: a checkpoint's
// data, each rank its own ranges of the datasets, after the first writer created the file's HDF5
// structure. How (FSDP_CKPT_DATA_IO; doc/checkpoint-format.md, "Save speed", has the measurements):
//   direct (the default): each rank with at least direct_min_bytes to write writes the 4 KiB-
//     aligned bulk of each piece with O_DIRECT
//     (straight from memory when it is aligned as the device needs, else through two aligned
//     32 MiB buffers so copying the next overlaps writing the last) and its unaligned head and tail
//     with buffered pwrite, then fsync. Where the filesystem refuses direct I/O, buffered pwrite.
//   posix: buffered pwrite of every byte straight from memory, asking the kernel every 64 MiB to
//     start writing back, then fsync.
//   collective: one MPI_File_write_at_all per round of all of a rank's pieces (ROMIO; with
//     FSDP_CKPT_ROMIO_CB=enable its aggregation, which a parallel file system with many small
//     pieces per rank may prefer); every rank makes the same number of calls.
//   independent: one MPI_File_write_at per block (for measuring the difference).
// In the MPI-IO modes, rounds (round_bytes) bound the bytes one call moves (MPI counts are int)
// and the staging memory of pieces that are produced on the fly; direct and posix stage a
// produced piece in blocks of at most 64 MiB (posix) or through the 32 MiB buffers (direct).
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

enum class IoMode {
  Direct,       // O_DIRECT for the aligned bulk, buffered head and tail, fsync per rank
  Posix,        // buffered pwrite + fsync per rank
  Collective,   // MPI_File_write_at_all per round
  Independent,  // MPI_File_write_at per block (for measuring the difference)
};

struct IoOptions {
  IoMode mode = IoMode::Direct;
  uint64_t round_bytes = uint64_t{256} << 20;
  // IoMode::Direct writes buffered when the rank has fewer bytes than this to write: the page
  // cache takes them faster than the device (doc/checkpoint-format.md, "Save speed").
  uint64_t direct_min_bytes = uint64_t{128} << 20;
};

// Collective over comm (every rank, even one with no pieces). Throws Errc::Io naming the file.
void write_pieces(MPI_Comm comm, const std::string& path, std::vector<IoPiece> pieces,
                  const IoOptions& options);

// The options the environment asks for: FSDP_CKPT_DATA_IO=direct|posix|collective|independent.
IoOptions io_options_from_environment();

}  // namespace fsdp::ckpt
