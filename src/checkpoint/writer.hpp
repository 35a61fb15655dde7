// Writing one checkpoint file: the HDF5 structure (groups, datasets at their full shapes,
// attributes, checksums, /index) created by the first writer (or collectively with parallel
// HDF5: FSDP_CKPT_METADATA), then every rank's pieces written straight into the datasets'
// contiguous storage (piece_writer.hpp: O_DIRECT and pwrite by default, or MPI-IO:
// FSDP_CKPT_DATA_IO), then an atomic commit.
// Knows nothing of units: fsdp-ckpt import uses it too.
//
// Why the data bypasses H5Dwrite: HDF5 1.10 (Debian 12) has no multi-dataset I/O, so a model of
// 2,000 parameters would cost 2,000 collective H5Dwrite calls (each a synchronisation of every
// writer); one pass of pwrite calls (or one collective MPI-IO call per round) moves all of a
// rank's pieces at once. The datasets are contiguous, unfiltered and allocated at creation, so
// their file offsets are fixed and the file is an ordinary HDF5 file.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/dtype.hpp"

namespace fsdp::ckpt {

struct Attr {
  enum class Kind { String, Int64, Float64 } kind = Kind::String;
  std::string name, text;
  int64_t integer = 0;
  double real = 0;
  static Attr str(std::string n, std::string v) {
    return {Kind::String, std::move(n), std::move(v)};
  }
  static Attr i64(std::string n, int64_t v) { return {Kind::Int64, std::move(n), {}, v}; }
  static Attr f64(std::string n, double v) { return {Kind::Float64, std::move(n), {}, 0, v}; }
};

struct GroupSpec {
  std::string path;  // "/" for the root's attributes
  std::vector<Attr> attrs;
};

struct DatasetSpec {
  std::string path;  // e.g. "/model/encoder.weight"
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;  // empty: a scalar
  uint64_t numel = 1;
  std::vector<Attr> attrs;  // a crc32c attribute is added from the data
  // Non-empty: a scalar fixed-length string dataset instead (no checksum), NUL-padded to whole
  // 8-byte words and written by the first writer itself: callers give no pieces for it.
  std::string text;
  bool is_text() const { return !text.empty(); }
  uint64_t text_bytes() const { return (text.size() + 8) / 8 * 8; }
};

struct FileStructure {
  std::vector<GroupSpec> groups;  // created in order
  std::vector<DatasetSpec> datasets;
};

// A range of one dataset that this rank writes: `count` elements from element `first` of the
// flattened dataset, read from `data` or produced on the fly (called for sub-ranges, in elements
// relative to `first`, possibly more than once: conversions).
struct WritePiece {
  std::size_t dataset = 0;
  uint64_t first = 0, count = 0;
  const void* data = nullptr;
  std::function<void(uint64_t first, uint64_t count, void* out)> produce;
};

struct WriteComms {
  MPI_Comm all = MPI_COMM_NULL;      // every rank taking part in the save
  MPI_Comm writers = MPI_COMM_NULL;  // the ranks that write (MPI_COMM_NULL on the others)
};

// Collective over comms.all. The writers' pieces must cover every dataset exactly once. Writes
// "<path>.tmp" (removing a stale one), then renames it to `path` and syncs the directory only
// after every rank succeeded; on any failure every rank throws the same error, the temporary file
// is removed and an earlier file at `path` is untouched.
void write_checkpoint(const WriteComms& comms, const std::string& path, const FileStructure& plan,
                      const std::vector<WritePiece>& mine);

std::string temporary_path(const std::string& path);

// rename(2) of tmp to path (atomic), then an fsync of the directory (durable). A file already at
// path is unlinked afterwards by a background thread (deferred_removal.hpp); a crash before that
// leaves it as <path>.prev-*, which the next commit of path removes.
void commit_rename(const std::string& tmp, const std::string& path);

// Now in UTC, ISO 8601: the root's "created" (rank 0's, broadcast).
std::string utc_timestamp();

}  // namespace fsdp::ckpt
