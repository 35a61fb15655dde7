#include "checkpoint/mpiio.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "base/agreement.hpp"
#include "base/environment.hpp"
#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp::ckpt {
namespace {

struct Block {
  uint64_t file_offset, bytes;
  std::size_t piece;
  uint64_t first;  // byte offset inside the piece
};

// Pieces in file order, cut into blocks of at most round_bytes, grouped into rounds of at most
// round_bytes each.
std::vector<std::vector<Block>> plan_rounds(std::vector<IoPiece>& pieces, uint64_t round_bytes) {
  std::sort(pieces.begin(), pieces.end(),
            [](const IoPiece& a, const IoPiece& b) { return a.file_offset < b.file_offset; });
  std::vector<std::vector<Block>> rounds(1);
  uint64_t in_round = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for (uint64_t first = 0; first < pieces[i].bytes;) {
      if (in_round == round_bytes) rounds.emplace_back(), in_round = 0;
      const uint64_t n = std::min(pieces[i].bytes - first, round_bytes - in_round);
      rounds.back().push_back({pieces[i].file_offset + first, n, i, first});
      first += n, in_round += n;
    }
  }
  if (rounds.back().empty()) rounds.pop_back();
  return rounds;
}

// ROMIO hints. Each rank's pieces are long contiguous runs, so two-phase collective buffering
// (every byte through a few aggregator ranks) and data sieving (reading whole extents, other
// ranks' bytes included, and read-modify-write) only add copies: both are off unless
// FSDP_CKPT_ROMIO_CB=enable|automatic asks for aggregation (many nodes on a parallel file system
// with few, small pieces per rank may prefer it).
void set_hints(MPI_Info info) {
  const char* cb = env(Env::CkptRomioCb);
  const char* mode = cb ? cb : "disable";
  MPI_Info_set(info, "romio_cb_write", mode);
  MPI_Info_set(info, "romio_ds_write", "disable");
}

class File {
 public:
  File(MPI_Comm comm, const std::string& path, int mode) {
    MPI_Info info;
    MPI_Info_create(&info);
    set_hints(info);
    const int rc = MPI_File_open(comm, path.c_str(), mode, info, &fh_);
    MPI_Info_free(&info);
    std::optional<Error> e;
    try {
      mpi_check(rc, ("MPI_File_open('" + path + "')").c_str());
    } catch (const Error& err) {
      e = Error(Errc::Io, err.what());
      fh_ = MPI_FILE_NULL;
    }
    agree_error(comm, e);
  }
  ~File() {
    if (fh_ != MPI_FILE_NULL) MPI_File_close(&fh_);
  }
  MPI_File get() const { return fh_; }
  void close(const std::string& path) {
    const int rc = MPI_File_close(&fh_);
    fh_ = MPI_FILE_NULL;
    if (rc != MPI_SUCCESS) fail(Errc::Io, "closing '" + path + "' failed");
  }

 private:
  MPI_File fh_ = MPI_FILE_NULL;
};

// Runs one MPI-IO call, keeping the first failure for later: the caller must keep making the
// collective calls so that no rank is left waiting.
void keep_error(std::optional<Error>& err, int rc, const std::string& what) {
  if (rc == MPI_SUCCESS || err) return;
  try {
    mpi_check(rc, what.c_str());
  } catch (const Error& e) {
    err = Error(Errc::Io, e.what());
  }
}

// One round as MPI datatypes: the file blocks (ascending offsets) and the memory blocks.
struct RoundTypes {
  MPI_Datatype file = MPI_BYTE, memory = MPI_BYTE;
  uint64_t bytes = 0;
  ~RoundTypes() {
    if (file != MPI_BYTE) MPI_Type_free(&file);
    if (memory != MPI_BYTE) MPI_Type_free(&memory);
  }
};

void build_types(const std::vector<Block>& blocks, const std::vector<char*>& memory,
                 RoundTypes& t) {
  if (blocks.empty()) return;
  std::vector<int> lengths;
  std::vector<MPI_Aint> file_disp, mem_disp;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    lengths.push_back(static_cast<int>(blocks[b].bytes));
    file_disp.push_back(static_cast<MPI_Aint>(blocks[b].file_offset));
    MPI_Aint a;
    MPI_Get_address(memory[b], &a);
    mem_disp.push_back(a);
    t.bytes += blocks[b].bytes;
  }
  const int n = static_cast<int>(blocks.size());
  mpi_check(MPI_Type_create_hindexed(n, lengths.data(), file_disp.data(), MPI_BYTE, &t.file),
            "MPI_Type_create_hindexed");
  mpi_check(MPI_Type_commit(&t.file), "MPI_Type_commit");
  mpi_check(MPI_Type_create_hindexed(n, lengths.data(), mem_disp.data(), MPI_BYTE, &t.memory),
            "MPI_Type_create_hindexed");
  mpi_check(MPI_Type_commit(&t.memory), "MPI_Type_commit");
}

}  // namespace

namespace {

// pwrite until every byte is written (it may write less than asked).
void write_fully(int fd, const char* data, uint64_t bytes, uint64_t offset,
                 const std::string& path) {
  while (bytes) {
    const ssize_t n = ::pwrite(fd, data, std::min<uint64_t>(bytes, uint64_t{1} << 30),
                               static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(Errc::Io, "writing '" + path + "': " + (n < 0 ? std::strerror(errno) : "short write"));
    data += n, bytes -= static_cast<uint64_t>(n), offset += static_cast<uint64_t>(n);
  }
}

// Asks the kernel to start writing [offset, offset + bytes) to the device now rather than at the
// fsync, so the device works while the next 64 MiB are copied into the page cache (a 2 GiB write
// + fsync took 1.0 s instead of 1.25 s here). Advice: the fsync still makes the data durable and
// reports any error.
void start_writeback(int fd, uint64_t offset, uint64_t bytes) {
#if defined(__linux__)
  ::sync_file_range(fd, static_cast<off64_t>(offset), static_cast<off64_t>(bytes),
                    SYNC_FILE_RANGE_WRITE);
#else
  (void)fd, (void)offset, (void)bytes;
#endif
}

// IoMode::Posix: this rank's blocks in file order, each straight from memory (or produced into a
// staging buffer), then fsync. Local; the caller agrees on the outcome.
void write_posix(const std::string& path, const std::vector<IoPiece>& pieces,
                 const std::vector<std::vector<Block>>& rounds, uint64_t round_bytes) {
  if (rounds.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) fail(Errc::Io, "opening '" + path + "': " + std::strerror(errno));
  std::optional<Error> err = attempt([&] {
    std::vector<char> staging;
    for (const std::vector<Block>& round : rounds)
      for (const Block& b : round) {
        const IoPiece& p = pieces[b.piece];
        const char* data = static_cast<const char*>(p.memory) + b.first;
        if (p.produce) {
          if (staging.size() < round_bytes) staging.resize(round_bytes);
          p.produce(b.first, b.bytes, staging.data());
          data = staging.data();
        }
        constexpr uint64_t kWriteback = uint64_t{64} << 20;
        for (uint64_t done = 0; done < b.bytes; done += kWriteback) {
          const uint64_t n = std::min(kWriteback, b.bytes - done);
          write_fully(fd, data + done, n, b.file_offset + done, path);
          start_writeback(fd, b.file_offset + done, n);
        }
      }
    if (::fsync(fd) != 0) fail(Errc::Io, "fsync of '" + path + "': " + std::strerror(errno));
  });
  if (::close(fd) != 0 && !err)
    err = Error(Errc::Io, "closing '" + path + "': " + std::strerror(errno));
  if (err) throw *err;
}

}  // namespace

void write_pieces(MPI_Comm comm, const std::string& path, std::vector<IoPiece> pieces,
                  const IoOptions& options) {
  auto rounds = plan_rounds(pieces, options.round_bytes);
  if (options.mode == IoMode::Posix) {
    std::optional<Error> err =
        attempt([&] { write_posix(path, pieces, rounds, options.round_bytes); });
    agree_error(comm, err);
    return;
  }
  uint64_t mine = rounds.size(), nrounds = 0;
  mpi_check(MPI_Allreduce(&mine, &nrounds, 1, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  File file(comm, path, MPI_MODE_WRONLY);
  std::optional<Error> err;
  std::vector<char> staging;
  for (uint64_t r = 0; r < nrounds; ++r) {
    const std::vector<Block> none;
    const std::vector<Block>& blocks = r < rounds.size() ? rounds[r] : none;
    std::vector<char*> memory;
    uint64_t staged = 0;
    for (const Block& b : blocks) {
      const IoPiece& p = pieces[b.piece];
      if (p.produce) {  // staged: produced into this round's buffer
        if (staging.size() < options.round_bytes) staging.resize(options.round_bytes);
        char* out = staging.data() + staged;
        if (!err) {
          err = attempt([&] { p.produce(b.first, b.bytes, out); });
        }
        memory.push_back(out);
        staged += b.bytes;
      } else {
        memory.push_back(static_cast<char*>(p.memory) + b.first);
      }
    }
    MPI_Status st;
    const std::string what = "writing '" + path + "'";
    if (options.mode == IoMode::Independent) {  // one independent call per block
      for (std::size_t b = 0; b < blocks.size() && !err; ++b) {
        const auto off = static_cast<MPI_Offset>(blocks[b].file_offset);
        const int n = static_cast<int>(blocks[b].bytes);
        keep_error(err, MPI_File_write_at(file.get(), off, memory[b], n, MPI_BYTE, &st), what);
        MPI_Count got = 0;
        MPI_Get_elements_x(&st, MPI_BYTE, &got);
        if (!err && static_cast<uint64_t>(got) != blocks[b].bytes)
          err = Error(Errc::Io, what + ": short write");
      }
      continue;
    }
    RoundTypes t;
    if (!err) build_types(blocks, memory, t);
    const bool empty = blocks.empty() || err.has_value();
    keep_error(err,
               MPI_File_set_view(file.get(), 0, MPI_BYTE, empty ? MPI_BYTE : t.file, "native",
                                 MPI_INFO_NULL),
               what);
    const int count = empty ? 0 : 1;
    keep_error(err, MPI_File_write_at_all(file.get(), 0, MPI_BOTTOM, count, t.memory, &st), what);
    if (!empty && !err) {
      MPI_Count got = 0;
      MPI_Get_elements_x(&st, MPI_BYTE, &got);
      if (static_cast<uint64_t>(got) != t.bytes)
        err = Error(Errc::Io, what + ": short write of " + std::to_string(got) + " of " +
                                  std::to_string(t.bytes) + " bytes");
    }
  }
  keep_error(err, MPI_File_sync(file.get()), "MPI_File_sync('" + path + "')");
  try {
    file.close(path);
  } catch (const Error& e) {
    if (!err) err = e;
  }
  agree_error(comm, err);
}

IoOptions io_options_from_environment() {
  IoOptions o;
  const int i = env_choice(Env::CkptDataIo, {"posix", "collective", "independent"});
  o.mode = i < 0 ? IoMode::Posix : static_cast<IoMode>(i);
  return o;
}

}  // namespace fsdp::ckpt
