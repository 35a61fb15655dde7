// Byte counts as people read them: "512 B", "1.5 GiB" (powers of 1024, up to PiB). Header-only
// and stateless, so the tools over the C API use it too (src/layers.txt).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fsdp {

// `decimals`: digits after the point, for 1 KiB and above.
inline std::string human_bytes(uint64_t bytes, int decimals = 1) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", u ? decimals : 0, v, unit[u]);
  return buf;
}

}  // namespace fsdp
