#include "checkpoint/piece_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>

#include "base/agreement.hpp"
#include "base/environment.hpp"
#include "base/error.hpp"
#include "base/mpi_check.hpp"
#include "checkpoint/posix_file.hpp"

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

// MPI-IO hints. Each rank's pieces are long contiguous runs, so two-phase collective buffering
// (every byte through a few aggregator ranks) and data sieving (reading whole extents, other
// ranks' bytes included, and read-modify-write) only add copies: both are off unless
// FSDP_CKPT_ROMIO_CB=enable|automatic asks for aggregation (many nodes on a parallel file system
// with few, small pieces per rank may prefer it). Given for whichever MPI-IO layer the MPI uses:
// the MPI standard's `collective_buffering` (Open MPI's OMPIO reads it; automatic leaves it to
// the layer) and ROMIO's own keys (MPICH; Open MPI's ROMIO component). A layer ignores the keys
// it does not know, so the bytes written are the same under any of them.
void set_hints(MPI_Info info) {
  const char* cb = env(Env::CkptRomioCb);
  const std::string mode = cb ? cb : "disable";
  MPI_Info_set(info, "romio_cb_write", mode.c_str());
  MPI_Info_set(info, "romio_ds_write", "disable");
  if (mode != "automatic")
    MPI_Info_set(info, "collective_buffering", mode == "enable" ? "true" : "false");
}

class MpiFile {
 public:
  MpiFile(MPI_Comm comm, const std::string& path, int mode) {
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
  ~MpiFile() {
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

// Direct transfers start, end and read memory at multiples of this: the page size, what every
// Linux filesystem that takes O_DIRECT accepts (most need only the device's 512-byte sectors).
constexpr uint64_t kDirectAlign = 4096;
// The two staging buffers of direct writes from memory that is not aligned like the file, or of
// produced pieces: one is filled while the other is written.
constexpr uint64_t kStageBytes = uint64_t{32} << 20;
// Buffered writes: the kernel is asked to start writing back after every this many bytes.
constexpr uint64_t kWriteback = uint64_t{64} << 20;

uint64_t align_up(uint64_t x) {
  return (x + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
}
uint64_t align_down(uint64_t x) {
  return x / kDirectAlign * kDirectAlign;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;

AlignedBuffer aligned_buffer(uint64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kDirectAlign, bytes) != 0)
    fail(Errc::OutOfMemory, "checkpoint write: " + std::to_string(bytes) + " bytes of staging");
  return AlignedBuffer(static_cast<char*>(p));
}

// The alignment direct writes need of memory: what the kernel reports (statx, Linux 6.1; 512 bytes
// for most devices), else a page. Shards aligned to it are written without a copy.
uint64_t direct_memory_alignment(const PosixFile& f) {
#ifdef STATX_DIOALIGN
  struct statx st {};
  if (::statx(f.fd(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) == 0 &&
      (st.stx_mask & STATX_DIOALIGN) && st.stx_dio_mem_align > 0 &&
      kDirectAlign % st.stx_dio_mem_align == 0)
    return st.stx_dio_mem_align;
#endif
  (void)f;
  return kDirectAlign;
}

// Testing hook, compiled only with FSDP_TEST_HOOKS: FSDP_CKPT_TEST_REFUSE_DIRECT=open|write makes
// this rank behave as on a filesystem that refuses O_DIRECT when the file is opened, or at the
// first direct write (tests/internal/test_piece_writer.cpp: the fall-back to buffered writes).
enum class Refusal { None, Open, Write };
Refusal refusal_for_test() {
#ifdef FSDP_TEST_HOOKS
  const int i = env_choice(Env::CkptTestRefuseDirect, {"open", "write"});
  return i < 0 ? Refusal::None : static_cast<Refusal>(i + 1);
#else
  return Refusal::None;
#endif
}

// IoMode::Direct and IoMode::Posix: one rank's pieces of the file, through a buffered descriptor
// and, while the filesystem takes direct I/O, an O_DIRECT one. Local; the caller agrees on the
// outcome.
class LocalWriter {
 public:
  LocalWriter(const std::string& path, bool direct) : buffered_(path, O_WRONLY) {
    const Refusal r = direct ? refusal_for_test() : Refusal::None;
    if (direct && r != Refusal::Open) direct_ = PosixFile::open_direct(path, O_WRONLY);
    if (direct_) memory_alignment_ = direct_memory_alignment(*direct_);
    refuse_writes_ = r == Refusal::Write;
  }

  void write(const IoPiece& p) {
    const uint64_t begin = p.file_offset, end = begin + p.bytes;
    const uint64_t a = align_up(begin), b = align_down(end);
    if (!direct_ || a >= b) return write_buffered(p, 0, p.bytes);
    write_buffered(p, 0, a - begin);
    write_direct(p, a - begin, b - a);
    write_buffered(p, b - begin, end - b);
  }

  // Every byte durable: the direct writes' allocations and the buffered bytes (one fsync of the
  // file covers both descriptors).
  void finish() {
    wait();
    buffered_.sync();
  }

 private:
  // Bytes [first, first + bytes) of the piece, through the page cache.
  void write_buffered(const IoPiece& p, uint64_t first, uint64_t bytes) {
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(kWriteback, bytes - done);
      const char* data = static_cast<const char*>(p.memory) + first + done;
      if (p.produce) {
        if (produced_.size() < n) produced_.resize(n);
        p.produce(first + done, n, produced_.data());
        data = produced_.data();
      }
      buffered_.write_at(data, n, p.file_offset + first + done);
      buffered_.start_writeback(p.file_offset + first + done, n);
      done += n;
    }
  }

  // Bytes [first, first + bytes) of the piece, aligned in the file, with O_DIRECT: from memory
  // when it is aligned as the device needs, else through the staging buffers, one written on a
  // second thread while the next is filled.
  void write_direct(const IoPiece& p, uint64_t first, uint64_t bytes) {
    const char* memory = p.produce ? nullptr : static_cast<const char*>(p.memory) + first;
    if (memory && reinterpret_cast<uintptr_t>(memory) % memory_alignment_ == 0) {
      wait();
      if (!direct_ || !direct_write(memory, bytes, p.file_offset + first))
        fallback(memory, bytes, p.file_offset + first);
      return;
    }
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min(kStageBytes, bytes - done);
      if (!stage_[next_]) stage_[next_] = aligned_buffer(kStageBytes);
      char* buf = stage_[next_].get();
      if (memory)
        std::memcpy(buf, memory + done, n);
      else
        p.produce(first + done, n, buf);
      wait();
      const uint64_t offset = p.file_offset + first + done;
      if (direct_) {
        pending_ = {buf, n, offset};
        inflight_ = std::async(std::launch::async,
                               [this, buf, n, offset] { return direct_write(buf, n, offset); });
      } else {
        fallback(buf, n, offset);
      }
      next_ ^= 1, done += n;
    }
  }

  bool direct_write(const char* data, uint64_t bytes, uint64_t offset) const {
    return !refuse_writes_ && direct_->write_direct_at(data, bytes, offset);
  }

  // The filesystem refused a direct write: this range and all the rest go through the page cache.
  void fallback(const char* data, uint64_t bytes, uint64_t offset) {
    direct_.reset();
    buffered_.write_at(data, bytes, offset);
  }

  // The direct write in flight done (its error thrown here; a refused one written buffered).
  void wait() {
    if (!inflight_.valid()) return;
    if (!inflight_.get()) fallback(pending_.data, pending_.bytes, pending_.offset);
  }

  struct Pending {
    const char* data = nullptr;
    uint64_t bytes = 0, offset = 0;
  };
  PosixFile buffered_;
  std::optional<PosixFile> direct_;
  uint64_t memory_alignment_ = kDirectAlign;
  bool refuse_writes_ = false;
  std::vector<char> produced_;
  AlignedBuffer stage_[2];
  int next_ = 0;
  Pending pending_;
  std::future<bool> inflight_;  // last: waited for before the buffers and descriptors go
};

void write_local(const std::string& path, std::vector<IoPiece>& pieces, bool direct,
                 uint64_t direct_min_bytes) {
  std::sort(pieces.begin(), pieces.end(),
            [](const IoPiece& a, const IoPiece& b) { return a.file_offset < b.file_offset; });
  uint64_t total = 0;
  for (const IoPiece& p : pieces) total += p.bytes;
  if (total == 0) return;
  LocalWriter w(path, direct && total >= direct_min_bytes);
  for (const IoPiece& p : pieces)
    if (p.bytes > 0) w.write(p);
  w.finish();
}

}  // namespace

void write_pieces(MPI_Comm comm, const std::string& path, std::vector<IoPiece> pieces,
                  const IoOptions& options) {
  if (options.mode == IoMode::Direct || options.mode == IoMode::Posix) {
    agree_error(comm, attempt([&] {
                  write_local(path, pieces, options.mode == IoMode::Direct,
                              options.direct_min_bytes);
                }));
    return;
  }
  auto rounds = plan_rounds(pieces, options.round_bytes);
  uint64_t mine = rounds.size(), nrounds = 0;
  mpi_check(MPI_Allreduce(&mine, &nrounds, 1, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  MpiFile file(comm, path, MPI_MODE_WRONLY);
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
  const int i = env_choice(Env::CkptDataIo, {"direct", "posix", "collective", "independent"});
  o.mode = i < 0 ? IoMode::Direct : static_cast<IoMode>(i);
  return o;
}

}  // namespace fsdp::ckpt
