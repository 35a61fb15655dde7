// Where the bytes of shards and buffers live: host memory, pinned host memory or CUDA device
// memory. The core calls the same operations whatever the space; a device space queues them on
// its own stream and joins the caller's stream at hand-over points (see handover_to_caller).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/dtype.hpp"
#include "base/store.hpp"
#include "memory/located.hpp"
#include "memory/update_args.hpp"

namespace fsdp {

// `count` elements of dtype `dtype` at `data`, in some memory space.
struct Span {
  const void* data;
  std::size_t count;
  DType dtype;
};

// A point in a memory space's queue of work (a CUDA event), for the caller's stream to wait on.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
};

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual const char* name() const = 0;
  // Whether the CPU may dereference this space's pointers (host and pinned host memory).
  virtual bool host_accessible() const = 0;

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
  // out[i] (+)= x[i] / divisor (divisor 1: no division), count elements, each array its dtype.
  virtual void scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count,
                      double divisor, Store store) = 0;
  // dst[i] = src[i], rounded to nearest even when narrowing.
  virtual void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t count) = 0;

  // Optimizer arithmetic on shards (float32 or float64), see memory/numeric.hpp. momentum may be
  // nullptr when args.momentum == 0, max_exp_avg_sq when !args.amsgrad.
  virtual void sgd_step(void* param, const void* grad, void* momentum, std::size_t count, DType t,
                        const SgdArgs& args) = 0;
  virtual void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                          void* max_exp_avg_sq, std::size_t count, DType t,
                          const AdamWArgs& args) = 0;
  virtual void scale(void* x, std::size_t count, DType t, double factor) = 0;
  // These return values to the CPU, so they wait for the space's queued work: once per call,
  // whatever the number of spans (a device computes every span's result, then reads them back
  // together). norm_partials: for each span in order, the sum of |x|^p, or for p = inf the
  // largest |x| (NaN if any element is NaN). all_finite: whether no element of any span is
  // infinite or NaN.
  virtual std::vector<double> norm_partials(const std::vector<Span>& spans, double p) = 0;
  virtual bool all_finite(const std::vector<Span>& spans) = 0;

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
