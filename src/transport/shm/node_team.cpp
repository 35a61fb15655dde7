#include "transport/shm/node_team.hpp"

#include <sched.h>

#include <new>
#include <string>

#include "core/error.hpp"
#include "core/mpi_check.hpp"

namespace fsdp::shm {

struct NodeTeam::Control {
  alignas(64) std::atomic<uint32_t> arrived{0};
  alignas(64) std::atomic<uint32_t> generation{0};
  alignas(64) SlotDecision decision;
  // followed by one Mailbox per team rank
};

namespace {

Mailbox* mailboxes(NodeTeam::Control* c) {
  return reinterpret_cast<Mailbox*>(c + 1);
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

void free_group(Group& g) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g.comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&g.comm);
  g.comm = MPI_COMM_NULL;
}

}  // namespace

NodeTeam::NodeTeam(const Group& group, int node_key) : group_(group) {
  team_ = split(group, node_key, group.rank);
  try {
    cross_ = split(group, team_.rank, group.rank);
    int sizes[2] = {team_.size, -team_.size};
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, group.comm),
              "MPI_Allreduce");
    if (sizes[0] != -sizes[1])
      fail(Errc::Unsupported, "the shared-memory transport needs the same number of ranks of a "
                              "shard group on each node (found " +
                                  std::to_string(sizes[0]) + " and " + std::to_string(-sizes[1]) +
                                  ")");
    cross_group_ranks_.resize(static_cast<std::size_t>(cross_.size));
    mpi_check(MPI_Allgather(&group.rank, 1, MPI_INT, cross_group_ranks_.data(), 1, MPI_INT,
                            cross_.comm),
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
  const uint32_t gen = control_->generation.load(std::memory_order_acquire);
  if (control_->arrived.fetch_add(1, std::memory_order_acq_rel) ==
      static_cast<uint32_t>(team_.size - 1)) {
    control_->arrived.store(0, std::memory_order_relaxed);
    control_->generation.store(gen + 1, std::memory_order_release);
    return;
  }
  // Spinning a little catches a partner running on another core; after that the core is given
  // up each time, since the partner may be waiting for this very core (oversubscription).
  for (unsigned spins = 0; control_->generation.load(std::memory_order_acquire) == gen; ++spins) {
    if (aborted()) fail(Errc::Aborted, "fsdp_abort was called while waiting for node peers");
    if (spins < 128)
      cpu_relax();
    else
      sched_yield();
  }
}

Mailbox& NodeTeam::mailbox(int team_rank) {
  return mailboxes(control_)[team_rank];
}

SlotDecision& NodeTeam::decision() {
  return control_->decision;
}

void NodeTeam::abort() {
  aborted_.store(true, std::memory_order_relaxed);
}

}  // namespace fsdp::shm
