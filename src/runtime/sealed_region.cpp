#include "runtime/sealed_region.hpp"

#include <sys/mman.h>

#include "base/crc32c.hpp"

namespace fsdp {

void SealedRegion::seal(char* data, std::size_t span, std::size_t bytes) {
  if (sealed_ || mprotect(data, span, PROT_READ) != 0) return;
  sealed_ = true;
  crc_ = crc32c(0, data, bytes);
}

void SealedRegion::unseal(char* data, std::size_t span) {
  if (!sealed_) return;
  mprotect(data, span, PROT_READ | PROT_WRITE);
  sealed_ = false;
}

bool SealedRegion::intact(const char* data, std::size_t bytes) const {
  return !sealed_ || crc32c(0, data, bytes) == crc_;
}

}  // namespace fsdp
