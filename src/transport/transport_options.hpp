// What a context's options say about how the transports work (ContextOptions.transport, from
// FSDP_REDUCE_SCATTER_ALGORITHM, FSDP_RING_MIN_BLOCK_BYTES and FSDP_RING_PIECE_BYTES): the MPI
// transport's algorithms, which the shared-memory and staged transports use for what crosses
// nodes.
#pragma once

#include <cstddef>

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

}  // namespace fsdp
