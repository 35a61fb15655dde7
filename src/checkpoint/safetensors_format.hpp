// The safetensors format (https://github.com/huggingface/safetensors, "Format"): an 8-byte
// little-endian header length N, N bytes of UTF-8 JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte buffer after the
// header) plus an optional "__metadata__" string map, then the byte buffer, which the tensors
// cover exactly, without holes or overlap. Values are little-endian and row-major.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fsdp::ckpt {

struct TensorEntry {
  std::string name, dtype;  // "F64", "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N
};

// Bytes per element of a dtype string; 0 for one this tool does not know.
std::size_t safetensors_dtype_size(const std::string& dtype);

// Parses and checks a header (names unique, offsets consistent with dtype and shape, the buffer
// covered exactly) of a file of `file_size` bytes. Throws fsdp::Error(Format) naming the problem.
SafetensorsHeader parse_safetensors(const std::string& json, uint64_t file_size);

// The header text for tensors already ordered as they will be written, padded with spaces to a
// multiple of 8 bytes (as the reference implementation does).
std::string safetensors_header_json(const std::vector<TensorEntry>& tensors,
                                    const std::map<std::string, std::string>& metadata);

// Hugging Face's index of a sharded model (model.safetensors.index.json):
// {"metadata": {"total_size": N, ...}, "weight_map": {tensor name: shard file name}}.
struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;
  std::map<std::string, std::string> metadata;  // integers as their decimal text
};

// Throws fsdp::Error(Format) naming the problem (not an object, no weight_map, a name twice...).
SafetensorsIndex parse_safetensors_index(const std::string& json);

// The index text, as transformers writes it (total_size: the tensors' bytes, headers excluded).
std::string safetensors_index_json(uint64_t total_size,
                                   const std::map<std::string, std::string>& weight_map);

}  // namespace fsdp::ckpt
