// Debug mode's guard over node-shared parameters this rank holds on a lease (runtime/lease.hpp):
// read-only in this process, so this rank's own stray write faults where it happens, and
// checksummed, so a node peer's write is found at the next check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp {

class SealedRegion {
 public:
  // Maps [data, data + span) read-only (whole pages) and checksums its first `bytes`. Does
  // nothing when already sealed, or when mprotect refuses.
  void seal(char* data, std::size_t span, std::size_t bytes);
  // Writable again.
  void unseal(char* data, std::size_t span);
  // Whether the first `bytes` are still those sealed; true when not sealed.
  bool intact(const char* data, std::size_t bytes) const;

 private:
  uint32_t crc_ = 0;
  bool sealed_ = false;
};

}  // namespace fsdp
