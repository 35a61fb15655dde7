// Where things are in a checkpoint file (format version 1, doc/checkpoint-format.md): the names
// of its groups, datasets and structural attributes, and how parameter names become dataset
// names. The values stored under these names are described by checkpoint/schema.hpp.
#pragma once

#include <cstddef>
#include <string>

namespace fsdp::ckpt {

constexpr const char* kFormatName = "fsdp-checkpoint";
constexpr int kFormatVersion = 1;

// Groups and datasets.
constexpr const char* kModelGroup = "/model";
constexpr const char* kOptimizersGroup = "/optimizers";
constexpr const char* kScalerGroup = "/grad_scaler";
constexpr const char* kMetadataGroup = "/metadata";
constexpr const char* kLayoutDataset = "/layout";
constexpr const char* kIndexDataset = "/index";

// Attributes that give the file its shape rather than a value: the root's magic, the number of
// optimizers and of an optimizer's groups, and each data dataset's checksum and update count.
constexpr const char* kFormatAttr = "format";
constexpr const char* kFormatVersionAttr = "format_version";  // read first: it decides the rest
constexpr const char* kCountAttr = "count";
constexpr const char* kNumGroupsAttr = "num_groups";
constexpr const char* kChecksumAttr = "crc32c";
constexpr const char* kStepAttr = "step";

// "/optimizers/<k>", "/optimizers/<k>/groups/<g>", "/optimizers/<k>/<state>".
std::string optimizer_path(std::size_t k);
std::string optimizer_group_path(std::size_t k, std::size_t g);
std::string state_path(std::size_t k, const std::string& state);

// Parameter names are dataset names in one flat group, not a hierarchy: "a.b" and "a.b.c" may
// both be parameters, and the names match safetensors keys. HDF5 reserves '/' and ".", so '%',
// '/' and a name that is exactly "." or ".." are percent-encoded; every other name is itself.
std::string escape_name(const std::string& name);
std::string unescape_name(const std::string& escaped);

}  // namespace fsdp::ckpt
