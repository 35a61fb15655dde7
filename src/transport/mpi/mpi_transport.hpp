// Collectives over MPI on host memory.
//
// Reduce-scatter has two algorithms. "ring": n-1 MPI_Sendrecv steps of one block each, the sum
// accumulated in place in the caller's (scratch) buffer, and the last step fused with the
// epilogue; it moves the same bytes as any bandwidth-optimal reduce-scatter and needs no extra
// pass over the shard. "mpi": MPI_Reduce_scatter_block into scratch, then the epilogue as a
// separate pass; fewer synchronizations, which wins for small blocks on oversubscribed nodes.
#pragma once

#include <cstddef>

#include "core/scratch.hpp"
#include "transport/transport.hpp"

namespace fsdp {

enum class ReduceScatterAlgorithm { Auto, Ring, Mpi };

struct MpiTransportOptions {
  ReduceScatterAlgorithm algorithm = ReduceScatterAlgorithm::Auto;
  // Auto picks the ring for 2 ranks (one exchange either way) and for blocks of at least this size.
  // 4 MiB: at 4 oversubscribed ranks the ring already beats MPI_Reduce_scatter_block plus the
  // epilogue pass there (16 MiB units: 0.97-1.01 against 1.01-1.06 of raw MPI).
  std::size_t ring_min_block_bytes = std::size_t(4) << 20;
  // Each ring step moves its block in pieces of this size so the add reads cache-hot data; 0 moves
  // whole blocks. Pieces cost one synchronization each, which on an oversubscribed node (more
  // ranks than cores) costs a scheduler time slice: the context sets 0 there.
  std::size_t ring_piece_bytes = std::size_t(256) << 10;
};

class MpiTransport final : public Transport {
 public:
  MpiTransport(Scratch& scratch, const MpiTransportOptions& options)
      : scratch_(scratch), options_(options) {}
  const char* name() const override { return "mpi"; }
  void all_gather(const void* shard, void* full, std::size_t count, DType t,
                  const Group& g) override;
  void reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                      const ReduceEpilogue& epilogue) override;
  void all_reduce(void* buf, std::size_t count, DType t, const Group& g) override;

 private:
  bool use_ring(std::size_t block_bytes, const Group& g) const;
  void ring_reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                           const ReduceEpilogue& epilogue);
  void mpi_reduce_scatter(void* full, std::size_t block_count, DType t, const Group& g,
                          const ReduceEpilogue& epilogue);

  Scratch& scratch_;
  MpiTransportOptions options_;
};

}  // namespace fsdp
