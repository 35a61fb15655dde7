// Collectives over NCCL on device memory, queued on the device memory space's stream: the CPU
// does not wait for them. One communicator per MPI group (shard, replicate, and hpZ's node group),
// made from the MPI split: rank 0 of the group creates the unique id and broadcasts it over the
// group's MPI communicator.
//
// All-gather runs in place when this rank's block is already in the unsharded buffer, else
// straight from the shard into the flat buffer; reduce-scatter runs in place in the flat gradient
// buffer and its epilogue (divide, convert, add into the gradient shard) is one kernel.
//
// Determinism: NCCL picks an algorithm by size, rank count and topology; for the same inputs and
// machine it picks the same one, so sums come out the same run after run (NCCL_ALGO=Ring pins it).
#pragma once

#include <nccl.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "base/group.hpp"
#include "memory/cuda/cuda_memory_space.hpp"
#include "transport/transport.hpp"

namespace fsdp::cuda {

class NcclTransport final : public Transport {
 public:
  // Collective over each of `groups` in turn (nccl_factory.hpp).
  NcclTransport(CudaMemorySpace& memory, const std::vector<const Group*>& groups);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  const char* name() const override { return "nccl"; }
  void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                  const Group& g) override;
  void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override;
  void all_reduce(void* buf, std::size_t count, DType t, const Group& g) override;
  // Local and callable from any thread: refuses new collectives, then aborts the communicators
  // (in-flight NCCL kernels return, so waits on the stream end).
  void abort() override;
  // The watchdog's error mode: aborted as by abort(), but later calls and waits fail with
  // Errc::Timeout (the watchdog's cause), not Errc::Aborted.
  void interrupt_for_timeout() override;

 private:
  // The group's communicator; throws Errc::Nccl when NCCL reported an asynchronous error on it,
  // and Errc::Aborted after abort().
  ncclComm_t comm_for(const Group& g);

  // The memory space's wait check: aborts the communicators and throws Errc::Nccl on an
  // asynchronous NCCL error, Errc::Aborted after abort().
  void check_while_waiting();

  CudaMemorySpace& memory_;
  // Made in the constructor in group order (shard, replicate, node: the same on every rank),
  // never changed after, destroyed in reverse creation order. Not a map keyed by the MPI handle:
  // handle values, hence a map's order, can differ between ranks, and ncclCommDestroy
  // communicates, so ranks destroying in different orders could deadlock at finalize.
  std::vector<std::pair<MPI_Comm, ncclComm_t>> comms_;
  // NCCL communicators are not thread-safe: a collective is queued (progress thread or caller)
  // under this lock, and abort (fsdp_abort, the watchdog, a failed wait) takes it before
  // ncclCommAbort, waiting a bounded time for a call stuck inside NCCL.
  std::timed_mutex enqueue_;
  // Held while a wait's check reads the communicators and while abort() frees them: a check
  // never reads a communicator ncclCommAbort freed (abort sets aborted_ first, the check reads it
  // under this lock).
  std::mutex comms_mutex_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> timed_out_{false};  // aborted by the watchdog's timeout
};

}  // namespace fsdp::cuda
