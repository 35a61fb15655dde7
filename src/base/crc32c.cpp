#include "base/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace fsdp {
namespace {

// The reflected Castagnoli polynomial.
constexpr uint32_t kPoly = 0x82f63b78u;

std::array<uint32_t, 256> make_byte_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc_table(uint32_t crc, const unsigned char* p, std::size_t n) {
  static const std::array<uint32_t, 256> table = make_byte_table();
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return crc;
}

// Polynomials mod kPoly, reflected: bit 31 is x^0. Product of a and b.
uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;  // b *= x
  }
  return product;
}

// x^(2^k) mod kPoly for k = 0..63: squaring gives the next.
std::array<uint32_t, 64> make_power_table() {
  std::array<uint32_t, 64> t{};
  uint32_t p = 1u << 30;  // x^1
  for (auto& e : t) {
    e = p;
    p = multiply(p, p);
  }
  return t;
}

// x^(8 * bytes) mod kPoly: appending `bytes` zero bytes multiplies the register by it.
uint32_t shift_power(uint64_t bytes) {
  static const std::array<uint32_t, 64> powers = make_power_table();
  uint32_t p = 1u << 31;  // x^0
  uint64_t bits = bytes;
  for (int k = 3; bits != 0 && k < 64; ++k, bits >>= 1)  // 8 * bytes = bytes << 3
    if (bits & 1) p = multiply(powers[static_cast<std::size_t>(k)], p);
  return p;
}

#if defined(__x86_64__)
// Three independent streams, so that the instruction's latency (3 cycles, one issued per cycle)
// is hidden: blocks of 3 x kStream bytes are checksummed in parallel and their registers joined
// by shifting (the register of A.B from A's and B's, B's taken from a zero register).
__attribute__((target("sse4.2"))) uint32_t crc_sse42(uint32_t crc, const unsigned char* p,
                                                     std::size_t n) {
  constexpr std::size_t kStream = 16384;
  static const uint32_t shift = shift_power(kStream);
  uint64_t c = crc;
  while (n >= 3 * kStream) {
    uint64_t c1 = 0, c2 = 0;
    for (std::size_t i = 0; i < kStream; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kStream + i, 8);
      std::memcpy(&v2, p + 2 * kStream + i, 8);
      c = _mm_crc32_u64(c, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
    }
    const uint32_t joined = multiply(shift, static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
    c = multiply(shift, joined) ^ static_cast<uint32_t>(c2);
    p += 3 * kStream, n -= 3 * kStream;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8, n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  crc = have_sse42() ? crc_sse42(crc, p, n) : crc_table(crc, p, n);
#else
  crc = crc_table(crc, p, n);
#endif
  return ~crc;
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  // crc(A.B) = crc(A) * x^(8|B|) + crc(B): the pre- and post-inversions of the two parts cancel.
  return multiply(shift_power(length_b), crc_a) ^ crc_b;
}

}  // namespace fsdp
