// Where each original parameter lives in a flat parameter and in each rank's shard of it.
//
// A unit's parameters form two sections, each concatenated in the caller's order: first those that
// require gradients, then the frozen ones. Every parameter starts at a multiple of kAlignNumel
// elements inside its section, and each rank's block of a section is a multiple of kAlignNumel
// elements (the section right-padded to shard_count blocks), so every parameter and every block
// starts 16-byte aligned in any dtype the library computes in (as PyTorch FSDP pads): NCCL's fast
// paths and vector loads through fsdp_param_data pointers. Padding is zero and has no gradient.
// Every rank's shard is its block of the first section followed by its block of the second, and
// the unsharded buffer is the first section followed by the second, so each section's all-gather
// output is in place. Gradients (the full gradient buffer, the gradient shard, optimizer state)
// cover only the first section: frozen parameters cost no gradient memory, whatever their mix
// with trainable ones (PyTorch's FlatParameter needs uniform requires_grad).
//
// Hybrid sharding over N replicas splits each rank's block of the trainable section further
// into N equal pieces (the block padded to N aligned pieces): gradient norms are summed piece by
// piece, and with HFSDP (fsdp_config_t.hfsdp) each replica's rank updates its piece alone (its
// "update range": what its gradient shard and optimizer state cover). Hybrid with and without
// HFSDP thus share one layout and one order of summation. A checkpoint stores each parameter
// unpadded, so files do not depend on the pieces.
//
// The dim-0 layout (ShardLayout::Dim0; FSDP2's per-parameter sharding) changes only what a block
// holds: rank r's block of a section is, for each parameter of the section in order, rows
// [r*c, min((r+1)*c, d0)) of it (c = ceil(d0 / shard_count), d0 its first extent, 1 for a
// scalar), each parameter's chunk given c rows' room rounded up to kAlignNumel elements. The
// unsharded buffer is laid out as in the flat layout (each parameter contiguous at its aligned
// offset, the section padded to shard_count blocks), so a block is no longer a range of it: an
// all-gather lands the blocks rank after rank and their pieces are then placed (pieces()), and a
// reduce-scatter's input is the full gradient's pieces put rank after rank. With one shard both
// layouts are the same.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/block_piece.hpp"
#include "base/dtype.hpp"

namespace fsdp {

// 8 elements: 16 bytes of the smallest dtype (bfloat16, float16), so an offset is aligned whether
// the buffer holds the storage dtype or a lower compute dtype.
constexpr std::size_t kAlignNumel = 8;
constexpr std::size_t align_up(std::size_t n) {
  return (n + kAlignNumel - 1) / kAlignNumel * kAlignNumel;
}

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // row-major extents, all > 0
  DType dtype = DType::Float32;
  bool requires_grad = true;
  std::size_t numel = 1;
};

// The part of one original parameter that one shard holds.
struct ShardSlice {
  std::size_t shard_offset = 0;  // first element inside the shard
  std::size_t param_offset = 0;  // first element inside the flattened parameter
  std::size_t length = 0;        // 0: the shard holds none of the parameter
};

enum class SectionKind : int { Trainable = 0, Frozen = 1 };

// What a block of a section holds (see above): a range of the flat concatenation, or each
// parameter's dim-0 chunk.
enum class ShardLayout : int { Flat = 0, Dim0 = 1 };

struct Section {
  std::size_t numel = 0;        // up to the last parameter's end, the padding between included
  std::size_t shard_numel = 0;  // one rank's block: ceil(numel / shard_count), aligned up
  std::size_t flat_base = 0;    // where the section starts in the unsharded buffer
  std::size_t shard_base = 0;   // where this section's block starts in every shard
  std::size_t padded_numel(int shard_count) const { return shard_numel * shard_count; }
};

class FlatLayout {
 public:
  // `pieces`: N for hybrid sharding over N replicas, else 1; `update_per_piece`: HFSDP.
  FlatLayout(std::vector<ParamSpec> params, int shard_count, int pieces = 1,
             bool update_per_piece = false, ShardLayout kind = ShardLayout::Flat);

  ShardLayout kind() const { return kind_; }
  // Whether each block is a range of the unsharded buffer (rank r's at r * shard_numel in each
  // section): the flat layout, or any layout with one shard. Else blocks are placed piece by
  // piece (pieces()).
  bool blocked() const { return kind_ == ShardLayout::Flat || shard_count_ == 1; }
  // The pieces of section k's blocks, for a layout that is not blocked (empty otherwise).
  const std::vector<BlockPiece>& pieces(SectionKind k) const {
    return pieces_of_[static_cast<int>(k)];
  }

  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec& param(std::size_t i) const { return params_[i]; }
  std::size_t num_params() const { return params_.size(); }
  DType dtype() const { return params_.front().dtype; }
  std::size_t element_size() const { return dtype_size(dtype()); }

  const Section& section(SectionKind k) const { return sections_[static_cast<int>(k)]; }
  const std::array<Section, 2>& sections() const { return sections_; }
  SectionKind section_of(std::size_t i) const {
    return params_[i].requires_grad ? SectionKind::Trainable : SectionKind::Frozen;
  }

  std::size_t numel() const { return numel_; }
  std::size_t padded_numel() const { return shard_numel() * shard_count_; }
  std::size_t shard_numel() const { return sections_[0].shard_numel + sections_[1].shard_numel; }
  // The trainable section: what the full gradient covers, and each rank's block of it (what the
  // shard group's reduce-scatter gives a rank).
  std::size_t grad_padded_numel() const { return sections_[0].padded_numel(shard_count_); }
  std::size_t trainable_shard_numel() const { return sections_[0].shard_numel; }
  // The pieces of a trainable block, and one piece's elements.
  int pieces() const { return pieces_; }
  std::size_t piece_numel() const { return sections_[0].shard_numel / pieces_; }
  // The gradient shard (and each optimizer state buffer): a rank's update range, the whole
  // trainable block unless HFSDP updates it piece by piece.
  std::size_t grad_shard_numel() const { return sections_[0].shard_numel / update_pieces(); }
  int update_pieces() const { return update_per_piece_ ? pieces_ : 1; }
  int shard_count() const { return shard_count_; }
  // Where piece `piece`'s update range starts inside the shard (the trainable block comes first).
  std::size_t update_offset(int piece) const {
    return static_cast<std::size_t>(piece) * grad_shard_numel();
  }
  // Parameter i's first element in the unsharded buffer (and, if trainable, in the full gradient).
  std::size_t flat_offset(std::size_t i) const { return offsets_[i]; }

  ShardSlice slice(std::size_t i, int shard_rank) const;
  // The part of parameter i in update range `piece` of shard `shard_rank`; shard_offset counts
  // from the range's start (an offset into the gradient shard and the optimizer state). Empty
  // for a frozen parameter.
  ShardSlice update_slice(std::size_t i, int shard_rank, int piece) const;

  // A hash of everything that must agree across ranks: names, shapes, dtypes, requires_grad, order.
  uint64_t fingerprint() const;

 private:
  std::vector<ParamSpec> params_;
  std::vector<std::size_t> offsets_;
  std::array<Section, 2> sections_;
  std::size_t numel_ = 0;
  int shard_count_ = 1;
  int pieces_ = 1;
  bool update_per_piece_ = false;
  ShardLayout kind_ = ShardLayout::Flat;
  std::array<std::vector<BlockPiece>, 2> pieces_of_;  // Dim0 with shard_count > 1
  std::vector<std::size_t> piece_index_;              // parameter i's entry in pieces_of_
};

}  // namespace fsdp
