// Collectives on memory the host transport cannot read (device memory) through host staging
// buffers: copy the operands into pinned host memory, run the host transport (MPI) there, copy the
// results back. This is how device buffers move where NCCL is not available, or where several
// ranks share one GPU (NCCL refuses two ranks on one device).
//
// Written against MemorySpace only, so it also runs over plain host memory, where a test compares
// it bit for bit with the host transport itself.
#pragma once

#include "runtime/scratch.hpp"
#include "transport/transport.hpp"

namespace fsdp {

class StagedTransport final : public Transport {
 public:
  // `device`: where the operands live; `staging`: host memory `device` can copy to and from;
  // `host`: the transport over staging memory. `direct_all_gather`: the host transport takes
  // device pointers itself (CUDA-aware MPI), so all-gathers skip the staging.
  StagedTransport(MemorySpace& device, MemorySpace& staging, MemoryAccounting& accounting,
                  Transport& host, bool direct_all_gather);
  const char* name() const override { return "mpi-staged"; }
  void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                  const Group& g) override;
  void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override;
  void all_reduce(void* buf, std::size_t count, DType t, const Group& g) override;

 private:
  MemorySpace& device_;
  Transport& host_;
  const bool direct_all_gather_;
  Scratch stage_, stage_out_;  // grow-only pinned buffers: steady state allocates nothing
};

}  // namespace fsdp
