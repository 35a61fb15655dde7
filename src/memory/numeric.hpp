// The arithmetic of one element, shared by the host kernels (memory/host) and the CUDA kernels
// (memory/cuda): compiled for both from this one text, with no fused multiply-add on either side
// (nvcc -fmad=false), so a device result is bit for bit the host's.
//
// bfloat16 and IEEE float16: storage types and conversions to and from float. Narrowing rounds to
// nearest, ties to even; NaN stays NaN (quiet) and infinities stay infinite; float16 handles
// subnormals exactly. Written out rather than left to the compiler's _Float16, __bf16 or CUDA's
// __nv_bfloat16 so every build and every device rounds the same way.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "memory/update_args.hpp"

#if defined(__CUDACC__)
#define FSDP_HD __host__ __device__ __forceinline__
#else
#define FSDP_HD inline
#endif

namespace fsdp::numeric {

struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

FSDP_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

FSDP_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

FSDP_HD float to_float(BFloat16 h) {
  return bits_float(static_cast<uint32_t>(h.bits) << 16);
}

FSDP_HD BFloat16 to_bfloat16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, force quiet
    return {static_cast<uint16_t>((u >> 16) | 0x0040u)};
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return {static_cast<uint16_t>((u + rounding) >> 16)};  // overflow rounds to infinity
}

FSDP_HD float to_float(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * bits_float(0x33800000u);  // 2^-24
  return sign ? -magnitude : magnitude;
}

FSDP_HD Float16 to_float16(float f) {
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

// Widening and narrowing between storage types and the type computed in.
FSDP_HD float widen(float x) {
  return x;
}
FSDP_HD double widen(double x) {
  return x;
}
FSDP_HD float widen(BFloat16 x) {
  return to_float(x);
}
FSDP_HD float widen(Float16 x) {
  return to_float(x);
}

template <class T, class C>
FSDP_HD T narrow(C x) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return to_bfloat16(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, Float16>)
    return to_float16(static_cast<float>(x));
  else
    return static_cast<T>(x);
}

// float64 on either side computes in double, everything else in float.
template <class A, class B>
using Compute =
    std::conditional_t<std::is_same_v<A, double> || std::is_same_v<B, double>, double, float>;

// ---- Optimizer updates of one element (float or double), PyTorch's single-tensor order ----

// The scalars of an SGD update, converted once to the element type.
template <class T>
struct SgdCoefficients {
  T lr, wd, mu, keep;
  bool decay, momentum, nesterov, first_step;
};

template <class T>
SgdCoefficients<T> sgd_coefficients(const SgdArgs& a) {
  return {static_cast<T>(a.lr),
          static_cast<T>(a.weight_decay),
          static_cast<T>(a.momentum),
          static_cast<T>(1.0 - a.dampening),
          a.weight_decay != 0.0,
          a.momentum != 0.0,
          a.nesterov,
          a.first_step};
}

// PyTorch: grad += wd * p; buf = momentum * buf + (1 - dampening) * grad (buf = grad at the first
// step); grad = nesterov ? grad + momentum * buf : buf; p += -lr * grad.
template <class T>
FSDP_HD void sgd_update(T& p, T g, T* buf, const SgdCoefficients<T>& c) {
  T d = g;
  if (c.decay) d = d + c.wd * p;
  if (c.momentum) {
    *buf = c.first_step ? d : c.mu * *buf + c.keep * d;
    d = c.nesterov ? d + c.mu * *buf : *buf;
  }
  p = p + (-c.lr) * d;
}

template <class T>
struct AdamWCoefficients {
  T decay, b1c, b2, b2c, eps, step, bc2;
};

template <class T>
AdamWCoefficients<T> adamw_coefficients(const AdamWArgs& a) {
  return {static_cast<T>(1.0 - a.lr * a.weight_decay),
          static_cast<T>(1.0 - a.beta1),
          static_cast<T>(a.beta2),
          static_cast<T>(1.0 - a.beta2),
          static_cast<T>(a.eps),
          static_cast<T>(-(a.lr / a.bias_correction1)),
          static_cast<T>(a.bias_correction2_sqrt)};
}

// PyTorch (decoupled weight decay): p *= 1 - lr * wd; m = m + (1 - beta1) * (g - m) (lerp);
// v = v * beta2 + (1 - beta2) * g * g; denom = sqrt(v) / sqrt(1 - beta2^t) + eps;
// p += -(lr / (1 - beta1^t)) * (m / denom).
template <class T>
FSDP_HD void adamw_update(T& p, T g, T& m, T& v, const AdamWCoefficients<T>& c) {
  p = p * c.decay;
  m = m + c.b1c * (g - m);
  v = v * c.b2 + c.b2c * (g * g);
#if defined(__CUDA_ARCH__)
  const T root = sqrt(v);  // correctly rounded (nvcc's default -prec-sqrt=true), as std::sqrt
#else
  const T root = std::sqrt(v);
#endif
  const T denom = root / c.bc2 + c.eps;
  p = p + c.step * (m / denom);
}

}  // namespace fsdp::numeric
