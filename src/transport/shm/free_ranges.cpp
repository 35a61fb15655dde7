#include "transport/shm/free_ranges.hpp"

#include <iterator>

namespace fsdp::shm {

std::optional<std::size_t> FreeRanges::take(std::size_t bytes) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::size_t offset = it->first, left = it->second - bytes;
    free_.erase(it);
    if (left) free_.emplace(offset + bytes, left);
    return offset;
  }
  return std::nullopt;
}

void FreeRanges::give(std::size_t offset, std::size_t bytes) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + bytes) {  // merge with the range after
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // and with the range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(offset, bytes);
}

}  // namespace fsdp::shm
