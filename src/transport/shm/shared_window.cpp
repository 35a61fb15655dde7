#include "transport/shm/shared_window.hpp"

#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/error.hpp"

namespace fsdp::shm {

std::size_t page_bytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::size_t round_to_pages(std::size_t bytes) {
  const std::size_t p = page_bytes();
  return (bytes + p - 1) / p * p;
}

int back_pages(char* data, std::size_t bytes) {
  if (bytes == 0) return 1;
#ifdef MADV_POPULATE_WRITE
  if (madvise(data, bytes, MADV_POPULATE_WRITE) == 0) return 1;
  if (errno != EINVAL) return 0;  // EFAULT (would be SIGBUS), ENOMEM, EHWPOISON
#endif
  // A kernel before 5.14: the filesystem's free space, which the window's pages would take.
  (void)data;
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return 1;  // not a tmpfs we can see: nothing to check
  return static_cast<unsigned long long>(st.f_bavail) * st.f_frsize >= bytes ? 1 : 0;
}

std::string shm_space_text() {
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return "/dev/shm: " + std::string(std::strerror(errno));
  const auto mib = [](unsigned long long b) { return std::to_string(b >> 20) + " MiB"; };
  return "/dev/shm has " + mib(static_cast<unsigned long long>(st.f_bavail) * st.f_frsize) +
         " free of " + mib(static_cast<unsigned long long>(st.f_blocks) * st.f_frsize);
}

namespace {

[[noreturn]] void cannot_back(unsigned long long total) {
  fail(Errc::OutOfMemory, "node shared memory: a window of " + std::to_string(total) +
                              " bytes cannot be backed; " + shm_space_text() +
                              " (enlarge it, e.g. docker run --shm-size, or use "
                              "FSDP_TRANSPORT=mpi)");
}

// Free bytes of /dev/shm, where MPICH and Open MPI (osc_sm_backing_directory) put the window's
// backing file; the largest value when it cannot be seen.
unsigned long long shm_free_bytes() {
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return ~0ULL;
  return static_cast<unsigned long long>(st.f_bavail) * st.f_frsize;
}

}  // namespace

SharedWindow::SharedWindow(MPI_Comm team, std::size_t my_bytes) {
  int size = 0;
  MPI_Comm_size(team, &size);
  // Each segment starts on a page of its own: the unsharded slots are mprotect-ed in debug mode,
  // and no two ranks then write into one cache line.
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  // MPI promises no alignment of a segment's base (Open MPI 4.1's osc/sm returns 8 mod 64), so a
  // non-empty segment asks for one page more and starts at its first page boundary.
  char* mine = nullptr;
  const std::size_t request = my_bytes == 0 ? 0 : round_to_pages(my_bytes) + page_bytes();
  // A window that cannot fit is refused on every rank before MPI is asked: Open MPI's allocation
  // then fails on the rank that creates the backing file while the others wait in it for ever.
  // Every rank sees the node's /dev/shm; the verdict is agreed all the same.
  unsigned long long total = request;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, team);
  int fits = shm_free_bytes() >= total + static_cast<unsigned long long>(size) * page_bytes();
  MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, team);
  if (!fits) {
    MPI_Info_free(&info);
    cannot_back(total);
  }
  const int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(request), 1, info, team, &mine, &win_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS)
    fail(Errc::OutOfMemory, "MPI_Win_allocate_shared of " + std::to_string(request) +
                                " bytes failed (node shared memory, /dev/shm, exhausted?)");
  // Node shared memory lives on a tmpfs (/dev/shm) and is sparse: a page touched beyond the
  // filesystem's size raises SIGBUS (Docker's default /dev/shm is 64 MB). Back this rank's
  // segment now, where a failure is an error: MADV_POPULATE_WRITE fails with EFAULT or ENOMEM
  // instead of faulting. Every team rank learns whether all of them succeeded.
  int backed = back_pages(mine, request);
  MPI_Allreduce(MPI_IN_PLACE, &backed, 1, MPI_INT, MPI_MIN, team);
  if (!backed) {
    MPI_Win_free(&win_);  // its pages go back first: the free space below is what is left
    MPI_Barrier(team);    // on every rank of the node
    cannot_back(total);
  }
  int* model = nullptr;
  int found = 0;
  MPI_Win_get_attr(win_, MPI_WIN_MODEL, &model, &found);
  if (!found || *model != MPI_WIN_UNIFIED) {
    MPI_Win_free(&win_);
    fail(Errc::Unsupported, "the MPI library's shared windows are not in the unified memory model");
  }
  bases_.resize(static_cast<std::size_t>(size));
  bytes_.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    MPI_Aint bytes = 0;
    int disp = 0;
    void* base = nullptr;
    MPI_Win_shared_query(win_, r, &bytes, &disp, &base);
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    const std::uintptr_t page = page_bytes();
    const bool empty = bytes == 0;
    bases_[static_cast<std::size_t>(r)] =
        empty ? static_cast<char*>(base) : reinterpret_cast<char*>((b + page - 1) / page * page);
    bytes_[static_cast<std::size_t>(r)] = empty ? 0 : static_cast<std::size_t>(bytes) - page;
  }
}

SharedWindow::~SharedWindow() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (win_ != MPI_WIN_NULL && !abandoned_ && !finalized) MPI_Win_free(&win_);
}

}  // namespace fsdp::shm
