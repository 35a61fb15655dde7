#include "core/flat_layout.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/fingerprint.hpp"

namespace fsdp {

FlatLayout::FlatLayout(std::vector<ParamSpec> params, int shard_count, int pieces,
                       bool update_per_piece, ShardLayout kind)
    : params_(std::move(params)),
      shard_count_(shard_count),
      pieces_(pieces),
      update_per_piece_(update_per_piece),
      kind_(kind) {
  if (params_.empty() || shard_count_ < 1 || pieces_ < 1)
    fail(Errc::Internal, "FlatLayout: empty unit");
  // Offsets inside each section first, each parameter at a multiple of kAlignNumel; callers
  // checked each numel and the total against overflow (the padding adds less than kAlignNumel per
  // parameter).
  offsets_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Section& s = sections_[static_cast<int>(section_of(i))];
    offsets_[i] = align_up(s.numel);
    s.numel = offsets_[i] + params_[i].numel;
    numel_ += params_[i].numel;
  }
  Section& trainable = sections_[0];
  Section& frozen = sections_[1];
  const std::size_t blocks = static_cast<std::size_t>(shard_count_) * pieces_;
  if (blocked()) {
    trainable.shard_numel = align_up((trainable.numel + blocks - 1) / blocks) * pieces_;
    frozen.shard_numel = align_up((frozen.numel + shard_count_ - 1) / shard_count_);
  } else {
    // Each parameter's chunk: c = ceil(d0 / shard_count) rows, room rounded up to kAlignNumel.
    // shard_count blocks hold at least the section (N * align_up(c * row) >= align_up(numel)).
    std::array<std::size_t, 2> block{};
    piece_index_.resize(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const ParamSpec& p = params_[i];
      const int k = static_cast<int>(section_of(i));
      const std::size_t d0 = p.shape.empty() ? 1 : static_cast<std::size_t>(p.shape[0]);
      const std::size_t rows = (d0 + shard_count_ - 1) / shard_count_;
      BlockPiece piece;
      piece.block_offset = block[k];
      piece.out_offset = offsets_[i];
      piece.stride = rows * (p.numel / d0);
      piece.total = p.numel;
      piece_index_[i] = pieces_of_[k].size();
      pieces_of_[k].push_back(piece);
      block[k] += align_up(piece.stride);
    }
    trainable.shard_numel = align_up((block[0] + pieces_ - 1) / pieces_) * pieces_;
    frozen.shard_numel = block[1];
  }
  frozen.flat_base = trainable.padded_numel(shard_count_);
  frozen.shard_base = trainable.shard_numel;
  for (std::size_t i = 0; i < params_.size(); ++i)
    offsets_[i] += sections_[static_cast<int>(section_of(i))].flat_base;
}

ShardSlice FlatLayout::slice(std::size_t i, int shard_rank) const {
  const Section& sec = section(section_of(i));
  if (!blocked()) {
    const BlockPiece& p = pieces_of_[static_cast<int>(section_of(i))][piece_index_[i]];
    ShardSlice s;
    s.length = p.length(shard_rank);
    if (s.length) {
      s.shard_offset = sec.shard_base + p.block_offset;
      s.param_offset = static_cast<std::size_t>(shard_rank) * p.stride;
    }
    return s;
  }
  const std::size_t block_begin =
      sec.flat_base + static_cast<std::size_t>(shard_rank) * sec.shard_numel;
  const std::size_t block_end = block_begin + sec.shard_numel;
  const std::size_t begin = std::max(offsets_[i], block_begin);
  const std::size_t end = std::min(offsets_[i] + params_[i].numel, block_end);
  ShardSlice s;
  if (begin < end) {
    s.shard_offset = sec.shard_base + (begin - block_begin);
    s.param_offset = begin - offsets_[i];
    s.length = end - begin;
  }
  return s;
}

ShardSlice FlatLayout::update_slice(std::size_t i, int shard_rank, int piece) const {
  ShardSlice s;
  if (!params_[i].requires_grad) return s;
  // The trainable block starts the shard, so the slice's shard offset is its offset in the block.
  const ShardSlice whole = slice(i, shard_rank);
  const std::size_t range_begin = update_offset(piece);
  const std::size_t range_end = range_begin + grad_shard_numel();
  const std::size_t begin = std::max(whole.shard_offset, range_begin);
  const std::size_t end = std::min(whole.shard_offset + whole.length, range_end);
  if (whole.length && begin < end) {
    s.shard_offset = begin - range_begin;
    s.param_offset = whole.param_offset + (begin - whole.shard_offset);
    s.length = end - begin;
  }
  return s;
}

uint64_t FlatLayout::fingerprint() const {
  Fingerprint f;
  f.add(static_cast<uint64_t>(params_.size()));
  f.add(static_cast<uint64_t>(kind_));
  for (const ParamSpec& p : params_) {
    f.add(p.name);
    f.add(static_cast<uint64_t>(p.shape.size()));
    for (int64_t e : p.shape) f.add(static_cast<uint64_t>(e));
    f.add(static_cast<uint64_t>(p.dtype));
    f.add(static_cast<uint64_t>(p.requires_grad));
  }
  return f.value();
}

}  // namespace fsdp
