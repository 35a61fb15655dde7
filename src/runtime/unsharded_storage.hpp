// Where a unit's unsharded parameters live while it is unsharded: the one interface through which
// a unit gets that storage, whatever the placement. The backend chooses the implementation with
// the transport (placement/transport_stacks.cpp): buffers from the context's pool (MPI, NCCL,
// staging), or the node's shared copy (the shared-memory transport: node slots, and zero-copy
// storage that keeps a unit's shards at their places in its unsharded copy for its whole life).
//
// A unit's storage, step by step (Unit::unshard_async and Unit::reshard):
//   place    unit creation, collective over the storage's team in creation order: a storage that
//            keeps shards in place gives the unit its home for life and says where its shard is.
//   claim    the caller's thread, when an unshard starts; local: the claim is held from here on.
//   acquire  the progress thread, in collective order: the buffer the all-gather fills, or
//            no buffer when the shards are already in place (nothing moves).
//   seal     after the all-gather (in collective order): the copy is complete on every rank.
//   release  reshard, or a failed all-gather; local.
#pragma once

#include <cstddef>

#include "memory/located.hpp"
#include "runtime/lease.hpp"

namespace fsdp {

class UnshardedStorage {
 public:
  // A unit's claim on its unsharded storage: kept for the unit's life (so a steady loop allocates
  // nothing), held from claim to release, its buffer a lease (runtime/lease.hpp) while held, or
  // for life when the shards stay in place.
  class Claim {
   public:
    Claim() = default;
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() {
      if (storage_ && held_) storage_->release(*this);
    }
    // Between claim and release (or a failed all-gather).
    bool held() const { return held_; }
    // The storage keeps the unit's shard in place, in this copy, for the unit's whole life.
    bool in_place() const { return in_place_; }
    void* data() const { return buffer_.data(); }
    bool intact() const { return buffer_.intact(); }

   private:
    friend class UnshardedStorage;
    UnshardedStorage* storage_ = nullptr;
    Lease buffer_;
    std::size_t bytes_ = 0;
    std::size_t charged_ = 0;  // what the storage counted in the memory statistics
    bool held_ = false;
    bool in_place_ = false;
  };

  virtual ~UnshardedStorage() = default;

  // Unit creation (collective over the storage's team): when the storage keeps the unit's shards
  // in place (`eligible`: every rank's shard is exactly its block of the unsharded buffer), `home`
  // holds the unit's copy for life and its data() is returned; nullptr otherwise (the shard lives
  // in the shard memory). Throws Errc::OutOfMemory on every team rank together.
  virtual void* place(Claim& home, std::size_t bytes, bool eligible) {
    (void)home, (void)bytes, (void)eligible;
    return nullptr;
  }
  // Local, on the caller's thread: `bytes` are held (and counted in the memory statistics) from
  // here on. Throws Errc::OutOfMemory, holding nothing.
  void claim(Claim& claim, std::size_t bytes) {
    claim.storage_ = this;
    claim.bytes_ = bytes;
    do_claim(claim, bytes);
    claim.held_ = true;
  }
  // In collective order (the progress thread): the buffer to fill and where it is (a transport
  // all-gathers a node copy in place), or no data when the shards are in place and every rank's
  // writes so far are now visible to the others.
  virtual Located acquire(Claim& claim) = 0;
  // After the all-gather filled the buffer (or acquire returned no data).
  virtual void seal(Claim& claim) { (void)claim; }
  // Local. The copy may be reused once every rank that shares it let it go.
  void release(Claim& claim) {
    if (!claim.held_) return;
    claim.held_ = false;
    do_release(claim);
  }

 protected:
  virtual void do_claim(Claim& claim, std::size_t bytes) = 0;
  virtual void do_release(Claim& claim) = 0;
  // For implementations: the claim's buffer, the bytes claimed, and what was counted for it.
  static Lease& buffer(Claim& claim) { return claim.buffer_; }
  static std::size_t bytes(const Claim& claim) { return claim.bytes_; }
  static std::size_t& charged(Claim& claim) { return claim.charged_; }
  static void set_in_place(Claim& claim) { claim.in_place_ = true; }
};

}  // namespace fsdp
