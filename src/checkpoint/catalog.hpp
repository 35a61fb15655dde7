// The catalog: everything a checkpoint file holds except the values, as C++ structs. A save
// describes the file it writes with one (its datasets aside), a load reads one and broadcasts it;
// checkpoint/schema.hpp says which of these fields the file stores, under which names.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.hpp"
#include "optim/optimizer.hpp"

namespace fsdp::ckpt {

// The root group's attributes.
struct RootInfo {
  int64_t format_version = 0;
  std::string library_version;
  int64_t world_size = 0, sharding_factor = 0;
  std::string strategy, created;
  int64_t num_units = 0;
};

// One dataset: a parameter or one optimizer state of it.
struct DatasetInfo {
  std::string name;  // the parameter name (unescaped)
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  uint64_t numel = 1;
  uint32_t crc = 0;
  uint64_t offset = 0;  // bytes from the file's start; contiguous, unfiltered storage
  int64_t step = -1;    // optimizer state: the updates made so far
  uint64_t bytes() const { return numel * dtype_size(dtype); }
};

// A hyperparameter group: the optimizer's own HyperParams, so that a load hands them back as
// they are and a new hyperparameter needs no copy here.
struct OptimizerGroupInfo : HyperParams {
  std::string pattern;  // "" for the defaults (group 0)
};

struct OptimizerInfo {
  std::string kind;  // "sgd" or "adamw"
  std::vector<OptimizerGroupInfo> groups;
  // state_names(kind)[k] -> datasets of parameters that have state, by name order.
  std::vector<std::vector<DatasetInfo>> states;
};

struct ScalerInfo {
  bool present = false;
  double scale = 0, growth_factor = 0, backoff_factor = 0;
  int64_t growth_interval = 0, growth_tracker = 0;
};

// The dataset named `name` in a list in name order (as the catalog keeps them), or nullptr.
const DatasetInfo* find_dataset(const std::vector<DatasetInfo>& by_name, const std::string& name);

struct Catalog : RootInfo {
  std::string layout;              // the /layout text
  std::vector<DatasetInfo> model;  // by name order
  std::vector<OptimizerInfo> optimizers;
  ScalerInfo scaler;
  std::vector<std::pair<std::string, std::string>> metadata;
  uint64_t file_size = 0;
  bool from_index = false;  // the dataset lists came from /index, not from a walk of the groups

  const DatasetInfo* find_param(const std::string& name) const { return find_dataset(model, name); }
  uint64_t total_bytes() const;  // of every dataset
};

// Whether two catalogs of one file list the same datasets with the same dtype, shape, offset,
// checksum and step (fsdp-ckpt verify: the index against a walk).
bool same_datasets(const Catalog& a, const Catalog& b);

// "[2, 3]": a shape in messages.
std::string shape_text(const std::vector<int64_t>& shape);

// The elements [first, last) of a dataset of n elements that rank `rank` of `size` handles when
// ranks split every dataset evenly (fsdp-ckpt and the safetensors conversions).
std::pair<uint64_t, uint64_t> element_share(uint64_t n, int rank, int size);

}  // namespace fsdp::ckpt
