// How bytes move between the ranks of a group: MPI (host memory), MPI through host staging
// (device memory), NCCL (device memory). Every operation is collective over the group it is given.
// An operation may complete asynchronously on the memory space's stream (NCCL); the memory space's
// synchronize() and hand-over points order it like any other queued work.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/block_piece.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/group.hpp"
#include "base/store.hpp"
#include "memory/located.hpp"

namespace fsdp {

// What a reduce-scatter does with its result: out[i] (+)= reduced[i] / divisor, converted to
// out_dtype (the gradient shard's dtype, which may be wider than the communicated one). Folding
// this into the reduction saves a pass over the shard, which costs 13-30% of an MPI
// reduce-scatter.
struct ReduceEpilogue {
  void* out = nullptr;
  DType out_dtype = DType::Float32;
  double divisor = 1.0;
  Store store = Store::Accumulate;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // full = concatenation of every rank's `shard` in group-rank order (count elements each).
  // shard == nullptr: in place, this rank's block of `full` already holds its shard. `full` says
  // where it is as its lender said (a node copy is all-gathered in place by the shared-memory
  // transport; the others read only its data).
  virtual void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                          const Group& g) = 0;

  // Whether all_gather_pieces can write the output over `g` directly (the host transports);
  // else the caller all-gathers into scratch and places the pieces itself (the copy-out FSDP2
  // makes after every all-gather).
  virtual bool places_pieces(const Group& g) {
    (void)g;
    return false;
  }
  // As all_gather, but the blocks are not ranges of `full`: each rank's block goes into `full`
  // piece by piece (base/block_piece.hpp; offsets in elements from `full`), its padding nowhere.
  // `shard` is this rank's block. Only where places_pieces says so.
  virtual void all_gather_pieces(const void* shard, const Located& full, std::size_t count, DType t,
                                 const Group& g, const std::vector<BlockPiece>& pieces) {
    (void)shard;
    (void)full;
    (void)count;
    (void)t;
    (void)g;
    (void)pieces;
    fail(Errc::Internal, std::string(name()) + " transport cannot place an all-gather's pieces");
  }

  // Block g.rank of the element-wise sum of every rank's `full` (g.size blocks of `block_count`
  // elements) goes through `epilogue`. `full` is used as scratch and its contents are lost; where
  // it is (node-shared: its peers read it in place) is as its lender said.
  virtual void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                              const ReduceEpilogue& epilogue) = 0;

  // In-place element-wise sum over the group (16-bit types summed in float, rounded once per
  // partial sum).
  virtual void all_reduce(void* buf, std::size_t count, DType t, const Group& g) = 0;

  // fsdp_abort: makes operations stuck in the transport return, and refuses new ones. Local.
  virtual void abort() {}
  // The watchdog's error mode: as abort(), but waits it ends report Errc::Timeout where they can.
  virtual void interrupt_for_timeout() { abort(); }
};

}  // namespace fsdp
