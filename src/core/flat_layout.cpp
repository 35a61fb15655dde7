#include "core/flat_layout.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/fingerprint.hpp"

namespace fsdp {

FlatLayout::FlatLayout(std::vector<ParamSpec> params, int shard_count, int pieces,
                       bool update_per_piece)
    : params_(std::move(params)),
      shard_count_(shard_count),
      pieces_(pieces),
      update_per_piece_(update_per_piece) {
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
  trainable.shard_numel = align_up((trainable.numel + blocks - 1) / blocks) * pieces_;
  frozen.shard_numel = align_up((frozen.numel + shard_count_ - 1) / shard_count_);
  frozen.flat_base = trainable.padded_numel(shard_count_);
  frozen.shard_base = trainable.shard_numel;
  for (std::size_t i = 0; i < params_.size(); ++i)
    offsets_[i] += sections_[static_cast<int>(section_of(i))].flat_base;
}

ShardSlice FlatLayout::slice(std::size_t i, int shard_rank) const {
  const Section& sec = section(section_of(i));
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
  const std::size_t range_begin =
      static_cast<std::size_t>(shard_rank) * sections_[0].shard_numel + update_offset(piece);
  const std::size_t range_end = range_begin + grad_shard_numel();
  const std::size_t begin = std::max(offsets_[i], range_begin);
  const std::size_t end = std::min(offsets_[i] + params_[i].numel, range_end);
  if (begin < end) {
    s.shard_offset = begin - range_begin;
    s.param_offset = begin - offsets_[i];
    s.length = end - begin;
  }
  return s;
}

uint64_t FlatLayout::fingerprint() const {
  Fingerprint f;
  f.add(static_cast<uint64_t>(params_.size()));
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
