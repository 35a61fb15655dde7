// Reading a checkpoint's catalog with serial HDF5: the root and attribute groups through the
// schema (checkpoint/schema.hpp), the datasets from /index or a walk of the groups.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "checkpoint/catalog.hpp"

namespace fsdp::ckpt {

// Where the dataset lists come from: /index when it describes the file (one dataset read), else a
// walk of the groups opening every dataset; or always the walk (fsdp-ckpt verify compares both).
enum class CatalogSource { Index, Walk };

// Reads the catalog and checks it: the file exists (Io), is an HDF5 file and an fsdp checkpoint
// (Format), not of a newer format version (Version), and every dataset lies inside the file
// (Corrupt when it runs past the end: a truncated file). The walk also checks that every dataset
// is a float32/float64 little-endian array in contiguous unfiltered storage.
Catalog read_catalog(const std::string& path, CatalogSource source = CatalogSource::Index);

// The user metadata only, after the same checks of the file as a whole (not of every dataset):
// cheap on a checkpoint of thousands of parameters.
std::vector<std::pair<std::string, std::string>> read_metadata(const std::string& path);

}  // namespace fsdp::ckpt
