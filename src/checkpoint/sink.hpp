// Where a checkpoint's bytes go: one existing file that this rank writes ranges of, then makes
// durable and closes. The format (HDF5 structure, safetensors header) is decided elsewhere; a
// sink only moves bytes, one implementation per way of moving them (ADIOS2's transports):
//   PosixSink (posix_sink.hpp): pwrite through the page cache, the 4 KiB-aligned bulk with
//     O_DIRECT when asked; each rank on its own.
//   MpiSink (mpi_sink.hpp): MPI-IO over a communicator, collective or independent writes.
// piece_writer.hpp chooses one for a save's data (FSDP_CKPT_DATA_IO); the safetensors export
// writes its files through a PosixSink.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace fsdp::ckpt {

// A range of the file and where its bytes come from.
struct IoPiece {
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
  const void* memory = nullptr;  // the source (unless produce is set)
  // Fills `bytes` bytes starting at byte `first` of the piece into `out` (conversion
  // on import); the piece is then staged through a bounded buffer instead of read from memory.
  std::function<void(uint64_t first, uint64_t bytes, void* out)> produce;
};

// Failures are Errc::Io naming the file. A PosixSink throws them at once. An MpiSink's calls are
// collective where MPI-IO's are (opening, write() in collective mode, sync, close): it keeps its
// first failure and throws it from close(), after every rank made the same calls, so that no rank
// is left waiting.
class Sink {
 public:
  virtual ~Sink() = default;
  // Every byte of [data, data + bytes) at `offset`.
  virtual void write_at(const void* data, uint64_t bytes, uint64_t offset) = 0;
  // Every piece at its offset, in the order and grouping that suit the sink (it may sort them).
  virtual void write(std::vector<IoPiece>& pieces) = 0;
  // Every byte written so far durable (fsync; MPI_File_sync).
  virtual void sync() = 0;
  // The file closed; no call after it.
  virtual void close() = 0;
};

}  // namespace fsdp::ckpt
