// bfloat16 and IEEE float16 on the host: storage types and conversions to and from float.
// Narrowing rounds to nearest, ties to even; NaN stays NaN (quiet) and infinities stay infinite;
// float16 handles subnormals exactly. Written out rather than left to the compiler's _Float16 or
// __bf16 so every build rounds the same way.
#pragma once

#include <cstdint>
#include <cstring>

namespace fsdp::host {

struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float to_float(BFloat16 h) {
  return bits_float(static_cast<uint32_t>(h.bits) << 16);
}

inline BFloat16 to_bfloat16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, force quiet
    return {static_cast<uint16_t>((u >> 16) | 0x0040u)};
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return {static_cast<uint16_t>((u + rounding) >> 16)};  // overflow rounds to infinity
}

inline float to_float(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * bits_float(0x33800000u);  // 2^-24
  return sign ? -magnitude : magnitude;
}

inline Float16 to_float16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u)  // NaN: quiet, top payload bits kept
    return {static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  if (magnitude >= 0x477ff000u)  // >= 65520 rounds to infinity (and infinity itself)
    return {static_cast<uint16_t>(sign | 0x7c00u)};
  if (magnitude < 0x38800000u) {  // below 2^-14: float16 subnormal or zero
    // Scale by 2^24 so the subnormal's integer mantissa is the rounded value; adding 0.5-ulp
    // magic through float arithmetic would round twice, so round the integer by hand.
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return {sign};  // below half the smallest subnormal: zero
    const uint32_t full = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // full * 2^(exponent-150) * 2^24 = full >> shift
    uint32_t q = full >> shift;
    const uint32_t rest = full & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return {static_cast<uint16_t>(sign | q)};  // q == 0x400 becomes the smallest normal
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t v = magnitude - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return {static_cast<uint16_t>(sign | (v >> 13))};
}

}  // namespace fsdp::host
