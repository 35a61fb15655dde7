#include "transport/shm/shared_window.hpp"

#include <unistd.h>

#include <string>

#include "core/error.hpp"

namespace fsdp::shm {

std::size_t page_bytes() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::size_t round_to_pages(std::size_t bytes) {
  const std::size_t p = page_bytes();
  return (bytes + p - 1) / p * p;
}

SharedWindow::SharedWindow(MPI_Comm team, std::size_t my_bytes) {
  int size = 0;
  MPI_Comm_size(team, &size);
  // Each segment starts on a page of its own: the unsharded slots are mprotect-ed in debug mode,
  // and no two ranks then write into one cache line.
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char* mine = nullptr;
  const std::size_t request = round_to_pages(my_bytes);
  const int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(request), 1, info, team, &mine, &win_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS)
    fail(Errc::OutOfMemory, "MPI_Win_allocate_shared of " + std::to_string(request) +
                                " bytes failed (node shared memory, /dev/shm, exhausted?)");
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
    bases_[static_cast<std::size_t>(r)] = static_cast<char*>(base);
    bytes_[static_cast<std::size_t>(r)] = static_cast<std::size_t>(bytes);
  }
}

SharedWindow::~SharedWindow() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (win_ != MPI_WIN_NULL && !abandoned_ && !finalized) MPI_Win_free(&win_);
}

}  // namespace fsdp::shm
