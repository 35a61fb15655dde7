// The checkpoint file format, version 1 (specified in doc/checkpoint-format.md): names of groups,
// datasets and attributes, how parameter names map to dataset names, and the catalog, which is
// everything a checkpoint holds except the values.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.hpp"

namespace fsdp::ckpt {

constexpr const char* kFormatName = "fsdp-checkpoint";
constexpr int kFormatVersion = 1;

// Groups and well-known names.
constexpr const char* kModelGroup = "/model";
constexpr const char* kOptimizersGroup = "/optimizers";
constexpr const char* kScalerGroup = "/grad_scaler";
constexpr const char* kMetadataGroup = "/metadata";
constexpr const char* kLayoutDataset = "/layout";
constexpr const char* kIndexDataset = "/index";
constexpr const char* kChecksumAttr = "crc32c";
constexpr const char* kStepAttr = "step";

// Parameter names are dataset names in one flat group, not a hierarchy: "a.b" and "a.b.c" may
// both be parameters, and the names match safetensors keys. HDF5 reserves '/' and ".", so '%',
// '/' and a name that is exactly "." or ".." are percent-encoded; every other name is itself.
std::string escape_name(const std::string& name);
std::string unescape_name(const std::string& escaped);

// Optimizer state buffers by optimizer kind ("sgd": momentum; "adamw": exp_avg, exp_avg_sq).
std::vector<std::string> state_names(const std::string& optimizer_kind);

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

struct OptimizerGroupInfo {
  std::string pattern;  // "" for the defaults (group 0)
  double lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  int64_t nesterov = 0;
  double beta1 = 0, beta2 = 0, eps = 0;
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

struct Catalog {
  int64_t format_version = 0;
  std::string library_version, strategy, created, layout;
  int64_t world_size = 0, sharding_factor = 0;
  std::vector<DatasetInfo> model;  // by name order
  std::vector<OptimizerInfo> optimizers;
  ScalerInfo scaler;
  std::vector<std::pair<std::string, std::string>> metadata;
  uint64_t file_size = 0;
  bool from_index = false;  // the dataset lists came from /index, not from a walk of the groups

  const DatasetInfo* find_param(const std::string& name) const { return find_dataset(model, name); }
  uint64_t total_bytes() const;  // of every dataset
};

// Where the dataset lists come from: /index when it describes the file (one dataset read), else a
// walk of the groups opening every dataset; or always the walk (fsdp-ckpt verify compares both).
enum class CatalogSource { Index, Walk };

// Reads the catalog with serial HDF5 and checks it: the file exists (Io), is an HDF5 file and an
// fsdp checkpoint (Format), not of a newer format version (Version), and every dataset lies
// inside the file (Corrupt when it runs past the end: a truncated file). The walk also checks
// that every dataset is a float32/float64 little-endian array in contiguous unfiltered storage.
Catalog read_catalog(const std::string& path, CatalogSource source = CatalogSource::Index);

// The user metadata only, after the same checks of the file as a whole (not of every dataset):
// cheap on a checkpoint of thousands of parameters.
std::vector<std::pair<std::string, std::string>> read_metadata(const std::string& path);

// Whether two catalogs of one file list the same datasets with the same dtype, shape, offset,
// checksum and step (fsdp-ckpt verify: the index against a walk).
bool same_datasets(const Catalog& a, const Catalog& b);

// For broadcasting a catalog read by one rank.
std::vector<char> serialize(const Catalog& c);
Catalog deserialize(const std::vector<char>& bytes);

}  // namespace fsdp::ckpt
