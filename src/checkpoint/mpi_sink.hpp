// The MPI-IO sink (checkpoint/sink.hpp): a file opened by every rank of a communicator, each
// writing its own ranges.
//   Collective: write() makes one MPI_File_write_at_all per round of all of a rank's pieces
//     (ROMIO; with FSDP_CKPT_ROMIO_CB=enable its aggregation, which a parallel file system with
//     many small pieces per rank may prefer); every rank makes the same number of calls.
//   Independent: write() makes one MPI_File_write_at per block (for measuring the difference).
// Rounds bound the bytes one call moves (MPI counts are int) and the staging memory of pieces
// that are produced on the fly. write_at is one independent call in either mode.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "checkpoint/sink.hpp"

namespace fsdp::ckpt {

class MpiSink : public Sink {
 public:
  enum class Calls { Collective, Independent };

  // Collective over comm: opens the existing file at `path`; a failure on any rank is thrown on
  // every rank.
  MpiSink(MPI_Comm comm, const std::string& path, Calls calls, uint64_t round_bytes);
  ~MpiSink() override;

  void write_at(const void* data, uint64_t bytes, uint64_t offset) override;
  void write(std::vector<IoPiece>& pieces) override;
  void sync() override;
  void close() override;  // throws the first failure this rank kept

 private:
  // Keeps the first failure of an MPI-IO call (rc not MPI_SUCCESS).
  void keep(int rc, const std::string& what);

  MPI_Comm comm_;
  std::string path_;
  Calls calls_;
  uint64_t round_bytes_;
  MPI_File fh_ = MPI_FILE_NULL;
  std::optional<Error> failure_;
  std::vector<char> staging_;
};

}  // namespace fsdp::ckpt
