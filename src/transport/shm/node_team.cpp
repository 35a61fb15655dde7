#include "transport/shm/node_team.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <ctime>
#include <new>
#include <string>

#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp::shm {

struct NodeTeam::Control {
  alignas(64) std::atomic<uint32_t> arrived{0};
  alignas(64) std::atomic<uint32_t> generation{0};  // also the futex word sleepers wait on
  std::atomic<uint32_t> sleepers{0};
  // followed by one Mailbox per team rank
};

namespace {

Mailbox* mailboxes(NodeTeam::Control* c) {
  return reinterpret_cast<Mailbox*>(c + 1);
}

// A futex on process-shared memory (no FUTEX_PRIVATE_FLAG): wakes sleepers in other processes.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word");
  timespec timeout{0, 10 * 1000 * 1000};  // wakes to check for fsdp_abort
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

namespace {

Group split(const Group& parent, int color, int key) {
  Group g;
  mpi_check(MPI_Comm_split(parent.comm, color, key, &g.comm), "MPI_Comm_split");
  MPI_Comm_rank(g.comm, &g.rank);
  MPI_Comm_size(g.comm, &g.size);
  return g;
}

}  // namespace

NodeTeam::NodeTeam(const Group& group, int node_key) : group_(group) {
  team_ = split(group, node_key, group.rank);
  try {
    cross_ = split(group, team_.rank, group.rank);
    int sizes[2] = {team_.size, -team_.size};
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, group.comm), "MPI_Allreduce");
    if (sizes[0] != -sizes[1])
      fail(Errc::Unsupported,
           "the shared-memory transport needs the same number of ranks of a "
           "shard group on each node (found " +
               std::to_string(sizes[0]) + " and " + std::to_string(-sizes[1]) + ")");
    cross_group_ranks_.resize(static_cast<std::size_t>(cross_.size));
    mpi_check(
        MPI_Allgather(&group.rank, 1, MPI_INT, cross_group_ranks_.data(), 1, MPI_INT, cross_.comm),
        "MPI_Allgather");
    const std::size_t bytes =
        sizeof(Control) + sizeof(Mailbox) * static_cast<std::size_t>(team_.size);
    window_ = std::make_unique<SharedWindow>(team_.comm, team_.rank == 0 ? bytes : 0);
    control_ = reinterpret_cast<Control*>(window_->segment(0));
    if (team_.rank == 0) {
      new (control_) Control();
      for (int r = 0; r < team_.size; ++r) new (&mailboxes(control_)[r]) Mailbox();
    }
    mpi_check(MPI_Barrier(team_.comm), "MPI_Barrier");  // the control block is initialized
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    spin_ns_ = cores >= team_.size ? kLongSpinNs : 0;
  } catch (...) {
    window_.reset();
    free_group(cross_);
    free_group(team_);
    throw;
  }
}

NodeTeam::~NodeTeam() {
  if (aborted()) window_->abandon();
  window_.reset();
  free_group(cross_);
  free_group(team_);
}

void NodeTeam::barrier() {
  if (team_.size == 1) return;
  Control& c = *control_;
  const uint32_t gen = c.generation.load(std::memory_order_acquire);
  if (c.arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<uint32_t>(team_.size - 1)) {
    c.arrived.store(0, std::memory_order_relaxed);
    c.generation.store(gen + 1, std::memory_order_seq_cst);
    if (c.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&c.generation);
    return;
  }
  // Spinning catches a partner running on another core: a futex wake costs tens of microseconds,
  // a unit's copy at 1 MiB about a hundred. Then the waiter sleeps on the generation word until
  // the last rank arrives: on an oversubscribed node (more ranks than cores) the partner may need
  // this very core, so there the spin is short, and yielding in a loop hands it over far less
  // reliably than sleeping.
  const auto start = std::chrono::steady_clock::now();
  bool spinning = true;
  for (unsigned spins = 0; c.generation.load(std::memory_order_acquire) == gen; ++spins) {
    if (const int why = aborted_.load(std::memory_order_acquire))
      fail(static_cast<Errc>(why),
           why == static_cast<int>(Errc::Timeout)
               ? "the watchdog's timeout expired while waiting for node peers"
               : "fsdp_abort was called while waiting for node peers");
    if (spinning && spins % 64 == 63)
      spinning = spins < kShortSpins ||
                 std::chrono::steady_clock::now() - start < std::chrono::nanoseconds(spin_ns_);
    if (spinning) {
      cpu_relax();
    } else {
      c.sleepers.fetch_add(1, std::memory_order_seq_cst);
      if (c.generation.load(std::memory_order_seq_cst) == gen) futex_wait(&c.generation, gen);
      c.sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

Mailbox& NodeTeam::mailbox(int team_rank) {
  return mailboxes(control_)[team_rank];
}

void NodeTeam::abort(Errc why) {
  int none = 0;
  aborted_.compare_exchange_strong(none, static_cast<int>(why), std::memory_order_acq_rel);
}

}  // namespace fsdp::shm
