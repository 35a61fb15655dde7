// The free byte ranges of one shared segment, first fit and coalesced: the bookkeeping of the
// gradient arena's segments and of the zero-copy storage's chunks. Not thread-safe (the owner
// locks).
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace fsdp::shm {

class FreeRanges {
 public:
  // The lowest offset of a free range of at least `bytes`, now taken; nullopt when none fits.
  std::optional<std::size_t> take(std::size_t bytes);
  // [offset, offset + bytes) is free again, merged with free neighbours.
  void give(std::size_t offset, std::size_t bytes);

 private:
  std::map<std::size_t, std::size_t> free_;  // offset -> bytes
};

}  // namespace fsdp::shm
