#include "checkpoint/direct_reads.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace fsdp::ckpt {

DirectReads::DirectReads(std::vector<char*> destination)
    : destination_(std::move(destination)), ranges_(destination_.size()) {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  budget_ = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : 0;
}

char* DirectReads::claim(std::size_t i, uint64_t range_bytes, uint64_t piece, uint64_t n) {
  if (!destination_[i]) return nullptr;
  Kept& k = ranges_[i];
  if (!k.values) {
    if (range_bytes > budget_) return nullptr;
    k.values.reset(new (std::nothrow) char[range_bytes]);
    if (!k.values) return nullptr;  // the piece goes through the scratch buffer instead
    budget_ -= range_bytes;
    k.direct.assign(load_piece_count(range_bytes), false);
    k.bytes = range_bytes;
  }
  char* to = destination_[i] + piece * kLoadPiece;
  std::memcpy(k.values.get() + piece * kLoadPiece, to, n);
  k.direct[piece] = true;
  return to;
}

void DirectReads::restore() noexcept {
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    const Kept& k = ranges_[i];
    for (uint64_t p = 0; k.values && p < k.direct.size(); ++p)
      if (k.direct[p])
        std::memcpy(destination_[i] + p * kLoadPiece, k.values.get() + p * kLoadPiece,
                    std::min(kLoadPiece, k.bytes - p * kLoadPiece));
  }
}

}  // namespace fsdp::ckpt
