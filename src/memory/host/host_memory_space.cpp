#include "memory/host/host_memory_space.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.hpp"

namespace fsdp {

void* HostMemorySpace::allocate_bytes(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p) fail(Errc::OutOfMemory, "host allocation of " + std::to_string(bytes) + " bytes failed");
  return p;
}

void HostMemorySpace::deallocate(void* p, std::size_t) {
  std::free(p);
}

void HostMemorySpace::zero(void* p, std::size_t bytes) {
  std::memset(p, 0, bytes);
}

void HostMemorySpace::copy(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}

}  // namespace fsdp
