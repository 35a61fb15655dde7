// Collectives on memory the host transport cannot read (device memory) through host staging
// buffers: copy the operands into pinned host memory, have the delegate (DelegatingTransport; the
// host transport, MPI) run the operation there, copy the results back. It carries every
// operation this way but the placed all-gather (all_gather_pieces), which it does not offer
// (places_pieces is false). This is how device buffers move where NCCL is not available, or where
// several ranks share one GPU (NCCL refuses two ranks on one device).
//
// Written against MemorySpace only, so it also runs over plain host memory, where a test compares
// it bit for bit with the host transport itself.
#pragma once

#include "runtime/scratch.hpp"
#include "transport/delegating_transport.hpp"

namespace fsdp {

class StagedTransport final : public DelegatingTransport {
 public:
  // `device`: where the operands live; `staging`: host memory `device` can copy to and from;
  // `host`: the delegate, the transport over staging memory (the table's delegate entry).
  // `direct_all_gather`: the host transport takes device pointers itself (CUDA-aware MPI), so
  // all-gathers go to it unstaged.
  StagedTransport(MemorySpace& device, MemorySpace& staging, MemoryAccounting& accounting,
                  Transport& host, bool direct_all_gather);
  const char* name() const override { return "mpi-staged"; }
  void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                  const Group& g) override;
  void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override;
  void all_reduce(void* buf, std::size_t count, DType t, const Group& g) override;
  // Staged pieces would need the host transport to place them into staging memory and a second
  // copy to the device: the caller all-gathers and places them itself.
  bool places_pieces(const Group& g) override {
    (void)g;
    return false;
  }
  void all_gather_pieces(const void* shard, const Located& full, std::size_t count, DType t,
                         const Group& g, const std::vector<BlockPiece>& pieces) override {
    Transport::all_gather_pieces(shard, full, count, t, g, pieces);  // refuses
  }
  // abort, interrupt_for_timeout: the delegate's (an operation waits only there).

 private:
  MemorySpace& device_;
  const bool direct_all_gather_;
  Scratch stage_, stage_out_;  // grow-only pinned buffers: steady state allocates nothing
};

}  // namespace fsdp
