// Writing many (file range, memory) pieces of one existing file from every rank: a checkpoint's
// data, each rank its own ranges of the datasets, after the first writer created the file's HDF5
// structure. The way the bytes move is a sink (checkpoint/sink.hpp), chosen once for the save
// (FSDP_CKPT_DATA_IO; doc/checkpoint-format.md, "Save speed", has the measurements):
//   direct (the default): a PosixSink with O_DIRECT for each rank with at least direct_min_bytes
//     to write (a rank with fewer writes buffered: the page cache takes them faster), then fsync.
//   posix: a PosixSink, buffered, then fsync.
//   collective: an MpiSink, one MPI_File_write_at_all per round of all of a rank's pieces.
//   independent: an MpiSink, one MPI_File_write_at per block (for measuring the difference).
// In the MPI-IO modes, rounds (round_bytes) bound the bytes one call moves and the staging memory
// of pieces that are produced on the fly; direct and posix stage a produced piece in blocks of at
// most 64 MiB (posix) or through the 32 MiB buffers (direct).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/sink.hpp"

namespace fsdp::ckpt {

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

// The sink `options` ask for, for a rank with `bytes` to write to the existing file at `path`:
// nullptr for a rank with nothing to write in a mode whose sink is its own (direct, posix).
// Collective over comm in the MPI-IO modes (every rank gets one).
std::unique_ptr<Sink> open_sink(MPI_Comm comm, const std::string& path, const IoOptions& options,
                                uint64_t bytes);

// Collective over comm (every rank, even one with no pieces): the pieces through open_sink's
// sink, made durable. Throws Errc::Io naming the file, the same error on every rank.
void write_pieces(MPI_Comm comm, const std::string& path, std::vector<IoPiece> pieces,
                  const IoOptions& options);

// The options the environment asks for: FSDP_CKPT_DATA_IO=direct|posix|collective|independent.
IoOptions io_options_from_environment();

}  // namespace fsdp::ckpt
