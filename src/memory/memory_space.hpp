// Where the bytes of shards and buffers live: host memory, pinned host memory or CUDA device
// memory. A space allocates, zeroes and copies, and hands out the kernels that compute on its
// memory (memory/kernels.hpp). The core calls the same operations whatever the space; a device
// space queues them, kernels included, on its own stream and joins the caller's stream at
// hand-over points (see handover_to_caller).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "memory/kernels.hpp"
#include "memory/located.hpp"

namespace fsdp {

// A point in a memory space's queue of work (a CUDA event), for the caller's stream to wait on.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
};

// Which memory a space's pointers address, as a caller's framework is told of it (DLPack's
// device: kDLCPU, kDLCUDAHost, kDLCUDA and the device).
struct Residence {
  enum class Kind { Host, PinnedHost, Cuda };
  Kind kind = Kind::Host;
  int device = 0;  // Cuda: the device's ordinal; 0 otherwise
};

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual const char* name() const = 0;
  // Whether the CPU may dereference this space's pointers (host and pinned host memory).
  virtual bool host_accessible() const = 0;
  virtual Residence residence() const = 0;

  // Throws Errc::OutOfMemory. The memory is not initialized. Counted (allocation_calls), so a
  // test or benchmark can see that steady-state training allocates nothing.
  void* allocate(std::size_t bytes) {
    void* p = allocate_bytes(bytes);
    allocation_calls_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  virtual void deallocate(void* p, std::size_t bytes) = 0;
  uint64_t allocation_calls() const { return allocation_calls_.load(std::memory_order_relaxed); }
  // Whether a buffer pool may cache this allocation for reuse (not a stopgap the space would
  // rather see freed: the shared-memory transport's private fallback, see shm/shared_arena.hpp).
  virtual bool keep_in_pool(const void*) const { return true; }
  // Where an allocation of this space is, asked once by whoever lends it out (the buffer pool):
  // private, but for the node-shared memory the shared-memory transport reads in place.
  virtual Where where(const void*) const { return Where{}; }

  // The operations below may run asynchronously (queued in order on the space's stream); the CPU
  // sees their results after synchronize(). Pointers of another space the device can address
  // (pinned host memory) are valid operands.
  virtual void zero(void* p, std::size_t bytes) = 0;
  // Either side may be any memory the space can address (a caller's host array included).
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // The arithmetic on this space's memory, queued in order with the operations above.
  virtual Kernels& kernels() = 0;

  // ---- Ordering against the caller (no-ops where everything is synchronous) ----
  // Blocks until every queued operation finished.
  virtual void synchronize() {}
  // Work queued here from now on runs after everything the caller queued so far (on its stream).
  virtual void take_from_caller() {}
  // Work the caller queues from now on runs after everything queued here.
  virtual void handover_to_caller() {}
  // Finer hand-over: a mark recorded after one unit's work (its all-gather), which the caller then
  // waits for alone, not for a prefetch queued behind it. nullptr where there is nothing to order.
  virtual std::unique_ptr<StreamMark> new_mark() { return nullptr; }
  virtual void record(StreamMark*) {}
  virtual void caller_waits(StreamMark*) {}

 protected:
  virtual void* allocate_bytes(std::size_t bytes) = 0;

 private:
  std::atomic<uint64_t> allocation_calls_{0};
};

}  // namespace fsdp
