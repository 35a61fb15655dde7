// The checkpoint piece writer (checkpoint/piece_writer.hpp) in every mode, against a byte image
// computed here: pieces that tile a file at aligned and unaligned offsets, from memory aligned
// like the file, 512 bytes off (what most devices take directly), 3 bytes off, and produced on
// the fly, spread over the ranks, one of
// them larger than both staging buffers together. Direct writes must leave the page cache alone
// (checked with mincore where the filesystem reports direct I/O support), and a filesystem that
// refuses O_DIRECT at open or at the first write (the FSDP_CKPT_TEST_REFUSE_DIRECT hook) must
// give the same file through buffered writes. A missing file fails on every rank alike.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "checkpoint/piece_writer.hpp"

using namespace fsdp;
using namespace fsdp::ckpt;

namespace {

int failures = 0;
int rank = 0, nranks = 1;

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d FAILED: %s\n", rank, what.c_str());
}

unsigned char expected(uint64_t x) {
  return static_cast<unsigned char>((x * 2654435761u >> 11) ^ (x >> 20));
}

// Piece sizes, in file order: below, at and around 4 KiB, a 70 MiB piece (more than the two
// 32 MiB staging buffers), odd sizes that leave later pieces unaligned.
const uint64_t kSizes[] = {
    1,    4095,    4096,          4097, 12345,        3 * 4096, (uint64_t{70} << 20) + 123,
    8191, 1 << 20, (5 << 20) + 7, 100,  9 * 4096 + 1, 3 << 20};

struct Layout {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
};

Layout layout() {
  Layout l;
  for (uint64_t s : kSizes) l.offsets.push_back(l.total), l.total += s;
  return l;
}

// Whether the kernel reports direct I/O alignment for this file (statx STATX_DIOALIGN): then a
// direct write leaves no page of its range in the page cache.
bool reports_direct_io(const std::string& path) {
#ifdef STATX_DIOALIGN
  struct statx st {};
  return ::statx(AT_FDCWD, path.c_str(), 0, STATX_DIOALIGN, &st) == 0 &&
         (st.stx_mask & STATX_DIOALIGN) && st.stx_dio_offset_align > 0;
#else
  (void)path;
  return false;
#endif
}

// Whether the page at `offset` of the file is in the page cache.
bool resident(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t at = offset / static_cast<uint64_t>(page) * static_cast<uint64_t>(page);
  void* p =
      ::mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_SHARED, fd, static_cast<off_t>(at));
  unsigned char v = 0;
  const bool ok = p != MAP_FAILED && ::mincore(p, static_cast<size_t>(page), &v) == 0;
  if (p != MAP_FAILED) ::munmap(p, static_cast<size_t>(page));
  ::close(fd);
  return ok && (v & 1);
}

// One save of the whole layout by all ranks in `mode`; checks the file byte for byte on rank 0.
void run(const std::string& path, IoMode mode, const char* refuse, const char* label,
         uint64_t direct_min_bytes = 0) {
  if (refuse)
    ::setenv("FSDP_CKPT_TEST_REFUSE_DIRECT", refuse, 1);
  else
    ::unsetenv("FSDP_CKPT_TEST_REFUSE_DIRECT");
  const Layout l = layout();
  if (rank == 0) {  // a fresh file of the final size, as the HDF5 structure leaves it
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    check(fd >= 0 && ::ftruncate(fd, static_cast<off_t>(l.total)) == 0, "creating the file");
    ::close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<IoPiece> pieces;
  std::vector<std::vector<char>> memory;
  for (std::size_t i = 0; i < l.offsets.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(nranks)) != rank) continue;
    IoPiece p;
    p.file_offset = l.offsets[i], p.bytes = kSizes[i];
    if (i % 4 < 3) {  // memory at the file offset's place in a 4 KiB page, 512 or 3 bytes past
      const uint64_t skew = (p.file_offset + (i % 4 == 1 ? 512 : i % 4 == 2 ? 3 : 0)) % 4096;
      memory.emplace_back(p.bytes + 2 * 4096);
      char* base = memory.back().data();
      char* m = base + (4096 - reinterpret_cast<uintptr_t>(base) % 4096) % 4096 + skew;
      for (uint64_t b = 0; b < p.bytes; ++b) m[b] = static_cast<char>(expected(p.file_offset + b));
      p.memory = m;
    } else {
      const uint64_t at = p.file_offset;
      p.produce = [at](uint64_t first, uint64_t bytes, void* out) {
        for (uint64_t b = 0; b < bytes; ++b)
          static_cast<char*>(out)[b] = static_cast<char>(expected(at + first + b));
      };
    }
    pieces.push_back(std::move(p));
  }
  IoOptions o;
  o.mode = mode;
  o.direct_min_bytes = direct_min_bytes;
  try {
    write_pieces(MPI_COMM_WORLD, path, pieces, o);
  } catch (const Error& e) {
    check(false, std::string(label) + ": " + e.what());
  }
  if (rank == 0) {
    // The 70 MiB piece: direct writes leave its middle out of the page cache, buffered ones not.
    const uint64_t middle = l.offsets[6] + (uint64_t{35} << 20);
    if (reports_direct_io(path)) {
      const bool direct = mode == IoMode::Direct && !refuse && direct_min_bytes == 0;
      check(resident(path, middle) != direct,
            std::string(label) + (direct ? ": written through the page cache, not directly"
                                         : ": expected buffered writes"));
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    std::vector<unsigned char> got(l.total);
    check(f && std::fread(got.data(), 1, got.size(), f) == got.size(),
          std::string(label) + ": reading back");
    if (f) std::fclose(f);
    uint64_t bad = 0;
    for (uint64_t x = 0; x < l.total; ++x)
      if (got[x] != expected(x) && bad++ == 0)
        check(false, std::string(label) + ": first wrong byte at " + std::to_string(x));
    struct stat st {};
    check(::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == l.total,
          std::string(label) + ": the file's size changed");
    ::unlink(path.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  const std::string path = "test_piece_writer." + std::to_string(nranks) + ".bin";
  run(path, IoMode::Direct, nullptr, "direct");
  run(path, IoMode::Direct, "open", "direct, refused at open");
  run(path, IoMode::Direct, "write", "direct, refused at the first write");
  run(path, IoMode::Direct, nullptr, "direct, below its minimum: buffered", uint64_t{1} << 40);
  run(path, IoMode::Posix, nullptr, "posix");
  run(path, IoMode::Collective, nullptr, "collective");
  // A file that is not there: every rank throws Errc::Io naming it.
  ::unsetenv("FSDP_CKPT_TEST_REFUSE_DIRECT");
  std::vector<IoPiece> one(1);
  std::vector<char> byte(1);
  one[0].bytes = 1, one[0].memory = byte.data();
  bool threw = false;
  try {
    write_pieces(MPI_COMM_WORLD, "no-such-dir/x.bin", one, IoOptions{});
  } catch (const Error& e) {
    threw = e.code() == Errc::Io &&
            std::string(e.what()).find("no-such-dir/x.bin") != std::string::npos;
  }
  check(threw, "a missing file: Errc::Io naming it on every rank");
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("test_piece_writer: %s\n", all ? "FAILED" : "passed");
  MPI_Finalize();
  return all ? 1 : 0;
}
