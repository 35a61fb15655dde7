// One MPI-3 shared-memory window over a node team: every rank contributes a segment (possibly
// empty) and can address every other rank's segment directly.
//
// The ranks synchronize through C++ atomics placed in window memory, not through MPI RMA
// synchronization calls; that is valid only in MPI's unified memory model (the window is plain
// shared memory), which the constructor checks.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace fsdp::shm {

class SharedWindow {
 public:
  // Collective over `team`. `my_bytes` may be 0. Segments are page-aligned whatever base MPI
  // returns (the window holds a page of slack per segment) and backed (populated) before use. Throws Errc::OutOfMemory on every team rank when MPI cannot allocate or a rank's
  // segment cannot be backed (/dev/shm too small), Errc::Unsupported when the window is not
  // unified.
  SharedWindow(MPI_Comm team, std::size_t my_bytes);
  // Frees the window (collective over the team) unless abandon() was called.
  ~SharedWindow();
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;

  char* segment(int team_rank) const { return bases_[static_cast<std::size_t>(team_rank)]; }
  std::size_t segment_bytes(int team_rank) const {
    return bytes_[static_cast<std::size_t>(team_rank)];
  }
  // After fsdp_abort: peers may never reach MPI_Win_free, so the window is leaked, not freed.
  void abandon() { abandoned_ = true; }

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  std::vector<char*> bases_;
  std::vector<std::size_t> bytes_;
  bool abandoned_ = false;
};

// 1 when `bytes` of shared memory at `data` are backed (populated: no SIGBUS on first touch), 0
// when the filesystem behind them (tmpfs, /dev/shm) cannot hold them. Local.
int back_pages(char* data, std::size_t bytes);
// "/dev/shm has N MiB free of M MiB", for messages.
std::string shm_space_text();

// The page size, and `bytes` rounded up to it.
std::size_t page_bytes();
std::size_t round_to_pages(std::size_t bytes);

}  // namespace fsdp::shm
