// What the library holds for a context, by category, and the peak of the total.
#pragma once

#include <cstddef>

namespace fsdp {

enum class MemoryKind { Shard, GradShard, Unsharded, PoolCached, Scratch, Count };

class MemoryAccounting {
 public:
  void add(MemoryKind k, std::size_t bytes) {
    bytes_[static_cast<int>(k)] += bytes;
    std::size_t total = 0;
    for (std::size_t b : bytes_) total += b;
    if (total > peak_) peak_ = total;
  }
  void sub(MemoryKind k, std::size_t bytes) { bytes_[static_cast<int>(k)] -= bytes; }
  std::size_t bytes(MemoryKind k) const { return bytes_[static_cast<int>(k)]; }
  std::size_t peak() const { return peak_; }

 private:
  std::size_t bytes_[static_cast<int>(MemoryKind::Count)] = {};
  std::size_t peak_ = 0;
};

}  // namespace fsdp
