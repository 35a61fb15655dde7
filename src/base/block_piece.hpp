// Where the pieces of each rank's block go when the blocks of an all-gather are not ranges of its
// output (the dim-0 unit layout, core/flat_layout.hpp): piece k of rank r's block starts at
// block_offset in the block and belongs at out_offset + r * stride of the output, length(r)
// elements of it. One description serves both directions: an all-gather's blocks placed into the
// unsharded order, and a full gradient's pieces put rank after rank for a reduce-scatter.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fsdp {

struct BlockPiece {
  std::size_t block_offset = 0;
  std::size_t out_offset = 0;
  std::size_t stride = 0;  // what one rank's piece holds at most
  std::size_t total = 0;   // the elements all ranks' pieces hold together
  std::size_t length(int r) const {
    const std::size_t begin = static_cast<std::size_t>(r) * stride;
    return begin >= total ? 0 : std::min(stride, total - begin);
  }
};

// For blocks of `block_numel` elements laid rank after rank (ranks `first` up to `last`,
// exclusive): piece(out, in, n) for each non-empty piece (out: its offset in the output, in: in
// the blocks), and gap(in, n) for each range of a block no piece covers (the padding), in
// increasing `in` order per block.
template <class Piece, class Gap>
void for_each_piece(const std::vector<BlockPiece>& pieces, std::size_t block_numel, int first,
                    int last, Piece&& piece, Gap&& gap) {
  for (int r = first; r < last; ++r) {
    const std::size_t base = static_cast<std::size_t>(r) * block_numel;
    std::size_t at = 0;
    for (const BlockPiece& p : pieces) {
      if (p.block_offset > at) gap(base + at, p.block_offset - at);
      const std::size_t n = p.length(r);
      if (n) piece(p.out_offset + static_cast<std::size_t>(r) * p.stride, base + p.block_offset, n);
      at = p.block_offset + n;
    }
    if (block_numel > at) gap(base + at, block_numel - at);
  }
}

}  // namespace fsdp
