// Collectives over MPI on host memory.
//
// Reduce-scatter has two algorithms. "ring": n-1 MPI_Sendrecv steps of one block each, the sum
// accumulated in place in the caller's (scratch) buffer, and the last step fused with the
// epilogue; it moves the same bytes as any bandwidth-optimal reduce-scatter and needs no extra
// pass over the shard. "mpi": MPI_Reduce_scatter_block into scratch, then the epilogue as a
// separate pass; fewer synchronizations, which wins for small blocks on oversubscribed nodes.
#pragma once

#include <cstddef>

#include "runtime/scratch.hpp"
#include "transport/transport.hpp"
#include "transport/transport_options.hpp"

namespace fsdp {

class MpiTransport final : public Transport {
 public:
  MpiTransport(Scratch& scratch, const MpiTransportOptions& options)
      : scratch_(scratch), options_(options) {}
  const char* name() const override { return "mpi"; }
  void all_gather(const void* shard, const Located& full, std::size_t count, DType t,
                  const Group& g) override;
  // Each rank's pieces straight to their places: one message per piece and peer (padding never
  // moves), this rank's own pieces copied.
  bool places_pieces(const Group& g) override {
    (void)g;
    return true;
  }
  void all_gather_pieces(const void* shard, const Located& full, std::size_t count, DType t,
                         const Group& g, const std::vector<BlockPiece>& pieces) override;
  void reduce_scatter(const Located& full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override;
  void all_reduce(void* buf, std::size_t count, DType t, const Group& g) override;

 private:
  void ring_reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                           const ReduceEpilogue& epilogue);
  void mpi_reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                          const ReduceEpilogue& epilogue);

  Scratch& scratch_;
  MpiTransportOptions options_;
};

}  // namespace fsdp
