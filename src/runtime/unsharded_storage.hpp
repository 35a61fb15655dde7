// Where a unit's unsharded parameters live while it is unsharded: the one interface through which
// a unit gets that storage, whatever the placement. The backend chooses the implementation with
// the transport (placement/select.cpp): buffers from the context's pool (MPI, NCCL, staging), or
// the node's shared copy (the shared-memory transport: node slots, and zero-copy storage that
// keeps a unit's shards at their places in its unsharded copy for its whole life).
//
// A unit's storage, step by step (Unit::unshard_async and Unit::reshard):
//   place    unit creation, collective over the storage's team in creation order: a storage that
//            keeps shards in place gives the unit its home for life and says where its shard is.
//   claim    the caller's thread, when an unshard starts; local: the lease is held from here on.
//   acquire  the progress thread, in collective order: the buffer the all-gather fills, or
//            nullptr when the shards are already in place (nothing moves).
//   seal     after the all-gather (in collective order): the copy is complete on every rank.
//   release  reshard, or a failed all-gather; local.
#pragma once

#include <cstddef>
#include <memory>

namespace fsdp {

class UnshardedStorage {
 public:
  // What an implementation keeps for one unit: created at the unit's first claim (or its place),
  // kept until the unit goes, so a steady loop allocates nothing.
  class Hold {
   public:
    virtual ~Hold() = default;
    virtual void* data() const = 0;
    // Debug mode: whether a sealed copy still holds what it held when sealed (a node peer wrote
    // into it while this rank held it); true when nothing was sealed.
    virtual bool intact() const { return true; }
  };

  // A unit's claim on its unsharded storage: the one lease type of every placement.
  class Lease {
   public:
    Lease() = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (storage_ && held_) storage_->release(*this);
    }
    // Between claim and release (or a failed all-gather).
    bool held() const { return held_; }
    // The storage keeps the unit's shard in place, in this copy, for the unit's whole life.
    bool in_place() const { return in_place_; }
    void* data() const { return hold_ ? hold_->data() : nullptr; }
    bool intact() const { return !hold_ || hold_->intact(); }

   private:
    friend class UnshardedStorage;
    UnshardedStorage* storage_ = nullptr;
    std::unique_ptr<Hold> hold_;
    std::size_t bytes_ = 0;
    bool held_ = false;
    bool in_place_ = false;
  };

  virtual ~UnshardedStorage() = default;

  // Unit creation (collective over the storage's team): when the storage keeps the unit's shards
  // in place (`eligible`: every rank's shard is exactly its block of the unsharded buffer), `home`
  // holds the unit's copy for life and its data() is returned; nullptr otherwise (the shard lives
  // in the shard memory). Throws Errc::OutOfMemory on every team rank together.
  virtual void* place(Lease& home, std::size_t bytes, bool eligible) {
    (void)home, (void)bytes, (void)eligible;
    return nullptr;
  }
  // Local, on the caller's thread: `bytes` are held (and counted in the memory statistics) from
  // here on. Throws Errc::OutOfMemory, holding nothing.
  void claim(Lease& lease, std::size_t bytes) {
    lease.storage_ = this;
    lease.bytes_ = bytes;
    do_claim(lease, bytes);
    lease.held_ = true;
  }
  // In collective order (the progress thread): the buffer to fill, or nullptr when the shards are
  // in place and every rank's writes so far are now visible to the others.
  virtual void* acquire(Lease& lease) = 0;
  // After the all-gather filled the buffer (or acquire returned nullptr).
  virtual void seal(Lease& lease) { (void)lease; }
  // Local. The copy may be reused once every rank that shares it let it go.
  void release(Lease& lease) {
    if (!lease.held_) return;
    lease.held_ = false;
    do_release(lease);
  }

 protected:
  virtual void do_claim(Lease& lease, std::size_t bytes) = 0;
  virtual void do_release(Lease& lease) = 0;
  // For implementations: the lease's hold (nullptr before the first claim or place), set once.
  static Hold* hold(const Lease& lease) { return lease.hold_.get(); }
  static void set_hold(Lease& lease, std::unique_ptr<Hold> h) { lease.hold_ = std::move(h); }
  static void set_in_place(Lease& lease) { lease.in_place_ = true; }
  static std::size_t bytes(const Lease& lease) { return lease.bytes_; }
};

}  // namespace fsdp
