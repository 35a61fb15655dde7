// The library's CRC-32C (three interleaved SSE4.2 streams where the CPU has them, a table
// otherwise) against a bit-at-a-time CRC-32C written here from the definition: the published
// check value ("123456789" -> e3069283), every length from 0 to 300 and lengths around the
// streams' block (3 x 16 KiB) and its multiples, unaligned starts, continuing a CRC across calls,
// and crc32c_combine of two parts against the whole.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/crc32c.hpp"

namespace {

uint32_t reference(uint32_t crc, const unsigned char* p, std::size_t n) {
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

int failures = 0, checks = 0;

void check(bool ok, const char* what, std::size_t n, std::size_t offset) {
  ++checks;
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAILED: %s (length %zu, offset %zu)\n", what, n, offset);
}

}  // namespace

int main() {
  const char* text = "123456789";
  check(fsdp::crc32c(0, text, 9) == 0xe3069283u, "the check value of \"123456789\"", 9, 0);
  std::vector<unsigned char> buf(4 * 49152 + 64);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (auto& b : buf) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    b = static_cast<unsigned char>(s);
  }
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (std::size_t block : {std::size_t{49152}, std::size_t{98304}, std::size_t{147456}})
    for (std::size_t d : {0, 1, 7, 8, 9, 4095})
      lengths.push_back(block + d), lengths.push_back(block - d - 1);
  for (std::size_t n : lengths)
    for (std::size_t offset : {0, 1, 3}) {
      if (offset + n > buf.size()) continue;
      const unsigned char* p = buf.data() + offset;
      const uint32_t want = reference(0, p, n);
      check(fsdp::crc32c(0, p, n) == want, "crc32c against the bitwise reference", n, offset);
      const std::size_t half = n / 3;
      check(fsdp::crc32c(fsdp::crc32c(0, p, half), p + half, n - half) == want,
            "a CRC continued across two calls", n, offset);
      check(fsdp::crc32c_combine(fsdp::crc32c(0, p, half), fsdp::crc32c(0, p + half, n - half),
                                 n - half) == want,
            "crc32c_combine of two parts", n, offset);
    }
  std::printf("test_crc32c: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
