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
#include <string>
#include <vector>

#include "base/memory_accounting.hpp"
#include "memory/host/host_memory_space.hpp"
#include "transport/shm/node_team.hpp"
#include "transport/shm/sealed_region.hpp"
#include "transport/shm/shared_window.hpp"

namespace fsdp::shm {

class NodeSlots {
 public:
  // A rank's hold on a slot, from the unshard's start (claimed, not yet filled in when the
  // all-gather is queued) to its reshard.
  class Lease {
   public:
    Lease() = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    bool claimed() const { return claimed_; }
    void* data() const { return data_; }
    // Debug mode: whether a sealed slot still holds what it held when sealed. A write by this rank
    // faults instead, so a change is a node peer's write while this rank held the slot: into its
    // own shard under zero-copy storage, or through a pointer kept past its own reshard. True when
    // the lease is not sealed (not debug mode).
    bool intact() const { return seal_.intact(data_, bytes_); }
    // Lets the slot go (it is free once every team rank let it go). Local.
    void reset();

   private:
    friend class NodeSlots;
    NodeSlots* owner_ = nullptr;  // set once filled in
    MemoryAccounting* accounting_ = nullptr;
    char* data_ = nullptr;
    std::size_t capacity_ = 0;
    std::size_t bytes_ = 0;    // asked for
    std::size_t charged_ = 0;  // this rank's share of the bytes asked for, in memory stats
    int index_ = -1;  // -1 once filled in: a private buffer, no node slot (AUTO's fallback)
    bool claimed_ = false;
    SealedRegion seal_;  // debug mode
  };

  // `protect`: a sealed slot is read-only in this process (debug mode: a caller writing into
  // parameters every rank of the node reads faults at the write) and checksummed.
  // `fall_back`: FSDP_TRANSPORT_AUTO on one node: a slot node shared memory cannot hold becomes a
  // private buffer of each rank (the transport then all-gathers it through MPI), with a warning.
  NodeSlots(NodeTeam& team, MemoryAccounting& accounting, bool protect, bool fall_back);
  ~NodeSlots();
  NodeSlots(const NodeSlots&) = delete;
  NodeSlots& operator=(const NodeSlots&) = delete;

  // Local, on the caller's thread when the unshard starts: the lease is charged from here on.
  void claim(Lease& lease, std::size_t bytes);
  // Collective over the team. Fills `lease` (claimed) with a slot of at least `bytes` that every
  // team rank now holds. Throws Errc::OutOfMemory (on every team rank) when a slot cannot be made
  // (node shared memory exhausted), unless `fall_back`: then every team rank gets a private
  // buffer instead.
  void acquire(std::size_t bytes, Lease& lease);
  // After every team rank wrote its blocks. In debug mode (`protect`) the slot turns read-only in
  // this process and its content is checksummed.
  void seal(Lease& lease);
  // Whether `p` points into a slot.
  bool contains(const void* p) const;
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
  void release(Lease& lease);
  int create(std::size_t bytes);  // collective; the new slot's index
  // `fall_back`: a private buffer for `lease` on every team rank (collective), or OutOfMemory.
  void acquire_private(std::size_t bytes, Lease& lease, const std::string& why);

  NodeTeam& team_;
  MemoryAccounting& accounting_;
  const bool protect_;
  const bool fall_back_;
  bool warned_ = false;
  HostMemorySpace private_memory_;  // AUTO's fallback buffers (the host allocator's alignment)
  mutable std::mutex mutex_;        // slots_: the progress thread changes it, stats read it
  std::vector<Slot> slots_;  // by index, identical on every team rank; window == null: unused
  std::atomic<uint64_t> allocation_calls_{0};
  std::atomic<uint64_t> held_{0};  // bit i: this rank holds slot i
};

}  // namespace fsdp::shm
