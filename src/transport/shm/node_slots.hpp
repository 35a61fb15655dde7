// The node's unsharded parameter buffers ("slots") for the shared-memory transport: one copy of
// an unsharded unit per node, in an MPI-3 shared window, instead of one per rank.
//
// A slot is chosen inside the unshard, which every team rank runs in the same collective order:
// each rank posts the slots it holds, and after a barrier every rank computes the same choice from
// the same posts: the smallest slot no rank holds that fits; when none fits, the free slots are
// all smaller than the request and of no use to it, so they are freed and one slot of the
// requested size is created (the BufferPool's rule). What a rank holds when it arrives follows
// from its program order (a reshard before the next unshard has released), not from how far its
// peers got, so a steady loop reuses the same slots. A rank holds its slot until its reshard; the
// rate limiter (max_unsharded) thus bounds the slots a rank holds, and the node's slots are those
// held by some rank plus at most the free ones not yet reused.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "memory/host/host_memory_space.hpp"
#include "runtime/lease.hpp"
#include "transport/shm/fallback.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/shared_window.hpp"

namespace fsdp::shm {

class NodeSlots final : public Lender {
 public:
  // `protect`: a sealed slot is read-only in this process (debug mode: a caller writing into
  // parameters every rank of the node reads faults at the write) and checksummed.
  // `fallback`: what happens when node shared memory cannot hold a slot.
  NodeSlots(NodeTeam& team, bool protect, Fallback& fallback);
  ~NodeSlots();
  NodeSlots(const NodeSlots&) = delete;
  NodeSlots& operator=(const NodeSlots&) = delete;

  // Collective over the team. Fills `lease` (empty) with a slot of at least `bytes` that every
  // team rank now holds (Where::Kind::NodeCopy). When node shared memory cannot hold one, throws
  // Errc::OutOfMemory on every team rank, unless the fallback allows MPI: then every team rank
  // gets a private buffer instead (Where::Kind::Private), which the transport all-gathers
  // through MPI.
  void acquire(std::size_t bytes, Lease& lease);
  // After every team rank wrote its blocks. In debug mode (`protect`) the slot turns read-only in
  // this process and its content is checksummed.
  void seal(Lease& lease);
  // Windows created so far.
  uint64_t allocation_calls() const {
    return allocation_calls_.load(std::memory_order_relaxed) + private_memory_.allocation_calls();
  }

 private:
  static constexpr int kMaxSlots = 64;  // a bit each in a mailbox's mask
  struct Slot {
    std::unique_ptr<SharedWindow> window;
    std::size_t capacity = 0;
    char* data() const { return window->segment(0); }
  };
  static constexpr uintptr_t kPrivate = ~uintptr_t{0};  // the ticket of a private buffer
  void take_back(Lease& lease) noexcept override;       // the ticket is the slot's index
  int create(std::size_t bytes);                        // collective; the new slot's index
  // A private buffer for `lease` on every team rank (collective), or OutOfMemory.
  void acquire_private(std::size_t bytes, Lease& lease, const Error& why);

  NodeTeam& team_;
  const bool protect_;
  Fallback& fallback_;
  HostMemorySpace private_memory_;  // the fallback's buffers (the host allocator's alignment)
  mutable std::mutex mutex_;        // slots_: the progress thread changes it, stats read it
  std::vector<Slot> slots_;  // by index, identical on every team rank; window == null: unused
  std::atomic<uint64_t> allocation_calls_{0};
  std::atomic<uint64_t> held_{0};  // bit i: this rank holds slot i
};

}  // namespace fsdp::shm
