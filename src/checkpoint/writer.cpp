#include "checkpoint/writer.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>

#include "base/agreement.hpp"
#include "base/crc32c.hpp"
#include "base/environment.hpp"
#include "base/mpi_check.hpp"
#include "checkpoint/deferred_removal.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/index.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/partial_checksums.hpp"
#include "checkpoint/piece_writer.hpp"
#include "checkpoint/posix_file.hpp"

namespace fsdp::ckpt {

std::string temporary_path(const std::string& path) {
  return path + ".tmp";
}

namespace {

uint32_t piece_crc(const WritePiece& p, std::size_t element_size) {
  if (!p.produce) return crc32c(0, p.data, p.count * element_size);
  constexpr uint64_t kChunk = uint64_t{16} << 20;  // bytes staged at a time
  const uint64_t per = std::max<uint64_t>(1, kChunk / element_size);
  std::vector<char> buf(std::min(p.count, per) * element_size);
  uint32_t crc = 0;
  for (uint64_t done = 0; done < p.count;) {
    const uint64_t n = std::min(per, p.count - done);
    p.produce(done, n, buf.data());
    crc = crc32c_combine(crc, crc32c(0, buf.data(), n * element_size), n * element_size);
    done += n;
  }
  return crc;
}

// Every writer learns every dataset's checksum (and that the pieces tile each dataset).
std::vector<uint32_t> dataset_checksums(MPI_Comm writers, const FileStructure& plan,
                                        const std::vector<WritePiece>& mine) {
  std::vector<PartialCrc> local;
  for (const WritePiece& p : mine) {
    const DatasetSpec& d = plan.datasets[p.dataset];
    if (p.count == 0) continue;
    local.push_back({p.dataset, p.first, p.count, piece_crc(p, dtype_size(d.dtype))});
  }
  std::vector<DatasetExtent> extents;
  for (const DatasetSpec& d : plan.datasets)
    extents.push_back({d.path, d.is_text() ? 0 : d.numel, dtype_size(d.dtype)});
  return combined_checksums(writers, local, extents);
}

hid_t file_type(DType t) {
  return t == DType::Float64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
}

void write_attrs(hid_t obj, const std::vector<Attr>& attrs) {
  for (const Attr& a : attrs) {
    switch (a.kind) {
      case Attr::Kind::String: write_attr_string(obj, a.name.c_str(), a.text); break;
      case Attr::Kind::Int64: write_attr_i64(obj, a.name.c_str(), a.integer); break;
      case Attr::Kind::Float64: write_attr_f64(obj, a.name.c_str(), a.real); break;
    }
  }
}

// What /index lists: every dataset but the text ones.
std::vector<IndexRow> index_rows(const FileStructure& plan, const std::vector<uint64_t>& offsets,
                                 const std::vector<uint32_t>& crc) {
  std::vector<IndexRow> rows;
  for (std::size_t i = 0; i < plan.datasets.size(); ++i) {
    const DatasetSpec& d = plan.datasets[i];
    if (d.is_text()) continue;
    IndexRow r{d.path, d.dtype, d.shape, offsets[i], crc[i], -1};
    for (const Attr& a : d.attrs)
      if (a.name == kStepAttr && a.kind == Attr::Kind::Int64) r.step = a.integer;
    rows.push_back(std::move(r));
  }
  return rows;
}

// Who creates the HDF5 structure (FSDP_CKPT_METADATA). Rank0: the first writer alone, with
// serial HDF5, while the others wait; the data then goes in from every writer (piece_writer.hpp).
// Collective / Independent: every writer with parallel HDF5, metadata written collectively or by
// each rank. Creating an object costs the same CPU on every rank that takes part, and parallel
// HDF5 adds synchronisation per object: at 2,000 parameters rank 0 alone takes half the time of
// two ranks together (bench/bench_checkpoint --pitfalls), and the gap grows with the ranks.
enum class Metadata { Rank0, Collective, Independent };

Metadata metadata_mode() {
  const int i = env_choice(Env::CkptMetadata, {"rank0", "collective", "independent"});
  return i < 0 ? Metadata::Rank0 : static_cast<Metadata>(i);
}

// The HDF5 part: file, groups, attributes, datasets allocated at creation (no fill values: the
// data is written once, next), /index. Returns each dataset's file offset. Called by every
// writer with parallel modes, by the first writer alone with Rank0.
std::vector<uint64_t> create_structure(MPI_Comm writers, Metadata mode, const std::string& tmp,
                                       const FileStructure& plan,
                                       const std::vector<uint32_t>& crc) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  QuietHdf5 quiet;
  Hid fapl(h5_check(H5Pcreate(H5P_FILE_ACCESS), Errc::Io, "H5Pcreate"));
  if (mode != Metadata::Rank0) {
    h5_check_status(H5Pset_fapl_mpio(fapl, writers, MPI_INFO_NULL), Errc::Io, "H5Pset_fapl_mpio");
    const bool collective = mode == Metadata::Collective;
    H5Pset_all_coll_metadata_ops(fapl, collective);
    H5Pset_coll_metadata_write(fapl, collective);
  }
  // The 1.8 file format: readable by every HDF5 tool of the last 15 years.
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
  // Large datasets start on 4 KiB pages (FSDP_CKPT_ALIGNMENT: e.g. the Lustre stripe size).
  hsize_t alignment = 4096;
  if (const char* a = env(Env::CkptAlignment)) alignment = std::strtoull(a, nullptr, 10);
  if (alignment > 1) H5Pset_alignment(fapl, 64 * 1024, alignment);
  Hid file(h5_check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), Errc::Io,
                    "cannot create '" + tmp + "'"));
  Hid lcpl(h5_check(H5Pcreate(H5P_LINK_CREATE), Errc::Io, "H5Pcreate"));
  H5Pset_create_intermediate_group(lcpl, 1);
  for (const GroupSpec& g : plan.groups) {
    if (g.path == "/") {
      Hid root(h5_check(H5Gopen2(file, "/", H5P_DEFAULT), Errc::Io, "/"));
      write_attrs(root, g.attrs);
      continue;
    }
    Hid grp(h5_check(H5Gcreate2(file, g.path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), Errc::Io,
                     "creating group " + g.path));
    write_attrs(grp, g.attrs);
  }
  Hid dcpl(h5_check(H5Pcreate(H5P_DATASET_CREATE), Errc::Io, "H5Pcreate"));
  H5Pset_layout(dcpl, H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  // Fill values would write every byte twice (FSDP_CKPT_FILL_TIME=alloc measures the cost).
  const char* fill = env(Env::CkptFillTime);
  H5Pset_fill_time(
      dcpl, fill && std::strcmp(fill, "alloc") == 0 ? H5D_FILL_TIME_ALLOC : H5D_FILL_TIME_NEVER);
  std::vector<uint64_t> offsets;
  for (std::size_t i = 0; i < plan.datasets.size(); ++i) {
    const DatasetSpec& d = plan.datasets[i];
    std::vector<hsize_t> dims(d.shape.begin(), d.shape.end());
    Hid space(h5_check(d.shape.empty()
                           ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                       Errc::Io, d.path + ": dataspace"));
    Hid str_type;
    if (d.is_text()) str_type = fixed_string_type(d.text_bytes());
    Hid ds(
        h5_check(H5Dcreate2(file, d.path.c_str(), d.is_text() ? str_type.get() : file_type(d.dtype),
                            space, lcpl, dcpl, H5P_DEFAULT),
                 Errc::Io, "creating dataset " + d.path));
    write_attrs(ds, d.attrs);
    if (!d.is_text()) write_attr_u32(ds, kChecksumAttr, crc[i]);
    const haddr_t off = H5Dget_offset(ds);
    if (off == HADDR_UNDEF) fail(Errc::Internal, d.path + ": no file offset after creation");
    offsets.push_back(off);
  }
  write_index(file, index_rows(plan, offsets, crc));
  close_file_checked(file, "closing '" + tmp + "'");
  return offsets;
}

}  // namespace

namespace {

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Removes what an earlier commit of `path` displaced and a crash left behind (<path>.prev-*).
void remove_stale_displaced(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string prefix =
      (slash == std::string::npos ? path : path.substr(slash + 1)) + ".prev-";
  DIR* d = ::opendir(directory_of(path).c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
      ::unlink((directory_of(path) + "/" + e->d_name).c_str());
  ::closedir(d);
}

}  // namespace

void commit_rename(const std::string& tmp, const std::string& path) {
  // The file being replaced keeps a second name until after the rename, so that rename(2) does
  // not free its blocks inside this call (0.4-0.7 s for 2 GiB here): a background thread unlinks
  // it (deferred_removal.hpp). Where a hard link cannot be made, the rename frees them itself.
  remove_stale_displaced(path);
  static std::atomic<unsigned> serial{0};
  std::string displaced =
      path + ".prev-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  if (::link(path.c_str(), displaced.c_str()) != 0) displaced.clear();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    if (!displaced.empty()) ::unlink(displaced.c_str());
    fail(Errc::Io, "renaming '" + tmp + "' to '" + path + "': " + std::strerror(saved));
  }
  // The rename is durable once the directory is: PosixFile's fsync (Errc::Io naming it).
  const std::optional<Error> synced =
      attempt([&] { PosixFile(directory_of(path), O_RDONLY | O_DIRECTORY).sync(); });
  if (!displaced.empty()) remove_later(displaced);
  if (synced) throw *synced;
}

std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// Refuses a save the filesystem has no room for, before anything is written: the file needs its
// data plus HDF5's metadata (object headers, attributes, /index, alignment padding; bounded
// generously here). Saving GBs only to fail near the end wastes the job's time, and HDF5 1.10
// cannot recover from a metadata flush that fails (its file object stays broken until the process
// ends), so a full disk must be found before HDF5 writes. A filesystem that reports no sizes
// (f_blocks 0, some FUSE and network mounts) is not checked.
void check_space(const std::string& tmp, const FileStructure& plan) {
  const std::size_t slash = tmp.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : tmp.substr(0, slash);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0 || st.f_blocks == 0) return;
  uint64_t need = 64 * 1024;
  for (const DatasetSpec& d : plan.datasets)
    need += (d.is_text() ? d.text_bytes() : d.numel * dtype_size(d.dtype)) + 6 * 1024;
  const uint64_t avail = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (avail < need)
    fail(Errc::Io, "'" + tmp + "': no space left on device: the checkpoint needs about " +
                       std::to_string(need) + " bytes, the filesystem has " +
                       std::to_string(avail) + " available");
}

// Testing hook (tests/fault/checkpoint_kill.sh), compiled only with FSDP_TEST_HOOKS (CMake
// option, on with the test suite): FSDP_CKPT_TEST_KILL_RANK=r makes world rank r SIGKILL itself
// after the file's structure exists and before its data is written.
void maybe_die_for_test(MPI_Comm all) {
#ifdef FSDP_TEST_HOOKS
  const char* v = env(Env::CkptTestKillRank);
  if (!v) return;
  int rank = 0;
  MPI_Comm_rank(all, &rank);
  if (std::atoi(v) == rank) std::raise(SIGKILL);
#else
  (void)all;
#endif
}

// ---- A save's phases, in order (write_checkpoint) ----

// 1. Every writer learns every dataset's checksum.
std::vector<uint32_t> agreed_checksums(MPI_Comm writers, const FileStructure& plan,
                                       const std::vector<WritePiece>& mine) {
  std::vector<uint32_t> crc;
  agree_on(writers, [&] { crc = dataset_checksums(writers, plan, mine); });
  return crc;
}

// 2. The first writer removes a stale temporary file and checks that the filesystem has room.
void prepare_temporary(MPI_Comm writers, bool first_writer, const std::string& tmp,
                       const FileStructure& plan) {
  agree_on(writers, [&] {
    if (!first_writer) return;
    if (std::remove(tmp.c_str()) != 0 && errno != ENOENT)
      fail(Errc::Io, "removing stale '" + tmp + "': " + std::strerror(errno));
    check_space(tmp, plan);
  });
}

// 3. The HDF5 structure, created as FSDP_CKPT_METADATA asks; every writer learns each dataset's
// file offset.
std::vector<uint64_t> create_agreed_structure(MPI_Comm writers, bool first_writer,
                                              const std::string& tmp, const FileStructure& plan,
                                              const std::vector<uint32_t>& crc) {
  std::vector<uint64_t> offsets(plan.datasets.size());
  Metadata mode = Metadata::Rank0;
  agree_on(writers, [&] {
    mode = metadata_mode();
    if (mode != Metadata::Rank0 || first_writer)
      offsets = create_structure(writers, mode, tmp, plan, crc);
  });
  if (mode == Metadata::Rank0)
    mpi_check(MPI_Bcast(offsets.data(), static_cast<int>(offsets.size()), MPI_UINT64_T, 0, writers),
              "MPI_Bcast");
  return offsets;
}

// 4. This writer's bytes as file ranges: the text datasets, NUL-padded (the first writer's), and
// its pieces.
std::vector<IoPiece> file_ranges(const FileStructure& plan, const std::vector<uint64_t>& offsets,
                                 const std::vector<WritePiece>& mine, bool first_writer) {
  std::vector<IoPiece> io;
  for (std::size_t i = 0; first_writer && i < plan.datasets.size(); ++i) {
    const DatasetSpec& d = plan.datasets[i];
    if (!d.is_text()) continue;
    std::string padded = d.text;
    padded.resize(d.text_bytes(), '\0');
    io.push_back(
        {offsets[i], d.text_bytes(), nullptr, [padded](uint64_t first, uint64_t bytes, void* out) {
           std::memcpy(out, padded.data() + first, bytes);
         }});
  }
  for (const WritePiece& p : mine) {
    const DatasetSpec& d = plan.datasets[p.dataset];
    const std::size_t es = dtype_size(d.dtype);
    IoPiece piece{offsets[p.dataset] + p.first * es, p.count * es, p.data, {}};
    if (p.produce) {
      piece.produce = [produce = p.produce, es](uint64_t first, uint64_t bytes, void* out) {
        // A sink may cut a block inside an element: produce whole elements, keep the bytes.
        const uint64_t e0 = first / es, e1 = (first + bytes + es - 1) / es;
        std::vector<char> whole((e1 - e0) * es);
        produce(e0, e1 - e0, whole.data());
        std::memcpy(out, whole.data() + (first - e0 * es), bytes);
      };
    }
    io.push_back(std::move(piece));
  }
  return io;
}

// 5. (write_pieces: every writer's ranges through the sink FSDP_CKPT_DATA_IO asks for.)
// 6. Committed only when every rank, writer or not, got here without error: the first rank
// renames the temporary file into place; on any failure the first writer removes it.
void commit_or_discard(const WriteComms& comms, const std::string& tmp, const std::string& path,
                       const std::optional<Error>& failure, bool first_writer) {
  int all_rank = 0;
  MPI_Comm_rank(comms.all, &all_rank);
  try {
    agree_error(comms.all, failure);
    agree_on(comms.all, [&] {
      if (all_rank == 0) commit_rename(tmp, path);
    });
  } catch (...) {
    if (first_writer) std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace

void write_checkpoint(const WriteComms& comms, const std::string& path, const FileStructure& plan,
                      const std::vector<WritePiece>& mine) {
  const std::string tmp = temporary_path(path);
  int writer_rank = -1;
  if (comms.writers != MPI_COMM_NULL) MPI_Comm_rank(comms.writers, &writer_rank);
  const bool first_writer = writer_rank == 0;
  const std::optional<Error> failure = attempt([&] {
    if (writer_rank < 0) return;
    const std::vector<uint32_t> crc = agreed_checksums(comms.writers, plan, mine);
    prepare_temporary(comms.writers, first_writer, tmp, plan);
    const std::vector<uint64_t> offsets =
        create_agreed_structure(comms.writers, first_writer, tmp, plan, crc);
    maybe_die_for_test(comms.all);
    write_pieces(comms.writers, tmp, file_ranges(plan, offsets, mine, first_writer),
                 io_options_from_environment());
  });
  commit_or_discard(comms, tmp, path, failure, first_writer);
}

}  // namespace fsdp::ckpt
