// What a context's options say about how the transports work (ContextOptions.transport, from
// FSDP_REDUCE_SCATTER_ALGORITHM, FSDP_RING_MIN_BLOCK_BYTES and FSDP_RING_PIECE_BYTES): the MPI
// transport's algorithms, which the shared-memory and staged transports use for what crosses
// nodes.
#pragma once

#include <climits>
#include <cstddef>

#include "base/dtype.hpp"

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

// The MPI transport's choices for a reduce-scatter of `block_count` elements of `t` per rank over
// `ranks` ranks (> 1), and the communication scratch each needs; the planner predicts that scratch
// from the same rules (plan/memory_plan.hpp).
// Ring or MPI_Reduce_scatter_block: MPI reduces predefined types only, with an int count.
inline bool reduce_scatter_uses_ring(const MpiTransportOptions& o, std::size_t block_count, DType t,
                                     int ranks) {
  const bool mpi_can = (t == DType::Float32 || t == DType::Float64) &&
                       block_count <= static_cast<std::size_t>(INT_MAX);
  if (!mpi_can) return true;
  switch (o.algorithm) {
    case ReduceScatterAlgorithm::Ring: return true;
    case ReduceScatterAlgorithm::Mpi: return false;
    case ReduceScatterAlgorithm::Auto: break;
  }
  return ranks == 2 || block_count * dtype_size(t) >= o.ring_min_block_bytes;
}
// Elements a ring step moves at once (and receives into scratch).
inline std::size_t ring_piece_numel(const MpiTransportOptions& o, std::size_t block_count,
                                    DType t) {
  const std::size_t piece = o.ring_piece_bytes / dtype_size(t);
  return piece == 0 || piece > block_count ? block_count : piece;
}
// The ring's incoming piece, or MPI_Reduce_scatter_block's reduced block; none over one rank.
inline std::size_t reduce_scatter_scratch_bytes(const MpiTransportOptions& o,
                                                std::size_t block_count, DType t, int ranks) {
  if (ranks == 1) return 0;
  return (reduce_scatter_uses_ring(o, block_count, t, ranks) ? ring_piece_numel(o, block_count, t)
                                                             : block_count) *
         dtype_size(t);
}

}  // namespace fsdp
