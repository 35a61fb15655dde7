// Where each original parameter lives in a flat parameter and in each rank's shard of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace fsdp {

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

// Parameters are concatenated in order and the total is right-padded to a multiple of the shard
// count, so every shard has the same length and the all-gather output is the flat parameter.
class FlatLayout {
 public:
  FlatLayout(std::vector<ParamSpec> params, int shard_count);

  const std::vector<ParamSpec>& params() const { return params_; }
  const ParamSpec& param(std::size_t i) const { return params_[i]; }
  std::size_t num_params() const { return params_.size(); }
  DType dtype() const { return params_.front().dtype; }
  std::size_t element_size() const { return dtype_size(dtype()); }

  std::size_t numel() const { return numel_; }
  std::size_t padded_numel() const { return shard_numel_ * shard_count_; }
  std::size_t shard_numel() const { return shard_numel_; }
  int shard_count() const { return shard_count_; }
  std::size_t flat_offset(std::size_t i) const { return offsets_[i]; }

  ShardSlice slice(std::size_t i, int shard_rank) const;

  // A hash of everything that must agree across ranks: names, shapes, dtypes, requires_grad, order.
  uint64_t fingerprint() const;

 private:
  std::vector<ParamSpec> params_;
  std::vector<std::size_t> offsets_;
  std::size_t numel_ = 0;
  std::size_t shard_numel_ = 0;
  int shard_count_ = 1;
};

}  // namespace fsdp
