#include "core/flat_layout.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/fingerprint.hpp"

namespace fsdp {

FlatLayout::FlatLayout(std::vector<ParamSpec> params, int shard_count)
    : params_(std::move(params)), shard_count_(shard_count) {
  if (params_.empty() || shard_count_ < 1) fail(Errc::Internal, "FlatLayout: empty unit");
  offsets_.reserve(params_.size());
  for (const ParamSpec& p : params_) {
    offsets_.push_back(numel_);
    numel_ += p.numel;  // callers checked each numel and the total against overflow
  }
  shard_numel_ = (numel_ + shard_count_ - 1) / shard_count_;
}

ShardSlice FlatLayout::slice(std::size_t i, int shard_rank) const {
  const std::size_t shard_begin = static_cast<std::size_t>(shard_rank) * shard_numel_;
  const std::size_t shard_end = shard_begin + shard_numel_;
  const std::size_t begin = std::max(offsets_[i], shard_begin);
  const std::size_t end = std::min(offsets_[i] + params_[i].numel, shard_end);
  ShardSlice s;
  if (begin < end) {
    s.shard_offset = begin - shard_begin;
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
