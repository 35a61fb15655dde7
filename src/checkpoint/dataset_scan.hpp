// Reading every dataset of a checkpoint in bounded memory, each rank a share of each dataset:
// what fsdp_checkpoint_verify and fsdp_checkpoint_diff walk (checkpoint/verify.cpp, compare.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/format.hpp"
#include "checkpoint/posix_file.hpp"

namespace fsdp::ckpt {

// Memory per rank stays at this whatever the checkpoint's size.
constexpr uint64_t kScanChunkBytes = uint64_t{16} << 20;

// Streams elements [first, last) of a dataset in chunks: fn(first_element, count, bytes).
inline void for_chunks(const PosixFile& f, const DatasetInfo& d, uint64_t first, uint64_t last,
                       const std::function<void(uint64_t, uint64_t, const char*)>& fn) {
  const std::size_t es = dtype_size(d.dtype);
  std::vector<char> buf(std::min<uint64_t>(kScanChunkBytes, (last - first) * es + 1));
  for (uint64_t e = first; e < last;) {
    const uint64_t n = std::min<uint64_t>(kScanChunkBytes / es, last - e);
    f.read_at(buf.data(), n * es, d.offset + e * es);
    fn(e, n, buf.data());
    e += n;
  }
}

// Every dataset of a catalog with its path in the file: the parameters (/model/NAME), then each
// optimizer state (/optimizers/K/STATE/NAME).
inline std::vector<std::pair<std::string, DatasetInfo>> labelled_datasets(const Catalog& c) {
  std::vector<std::pair<std::string, DatasetInfo>> v;
  for (const auto& d : c.model) v.emplace_back("/model/" + d.name, d);
  for (std::size_t k = 0; k < c.optimizers.size(); ++k) {
    const auto names = state_names(c.optimizers[k].kind);
    for (std::size_t b = 0; b < c.optimizers[k].states.size(); ++b)
      for (const auto& d : c.optimizers[k].states[b])
        v.emplace_back("/optimizers/" + std::to_string(k) + "/" + names[b] + "/" + d.name, d);
  }
  return v;
}

}  // namespace fsdp::ckpt
