// The arithmetic of one element, shared by the host kernels (memory/host) and the CUDA kernels
// (memory/cuda): compiled for both from this one text, so a device result is bit for bit the
// host's. Nothing is contracted into a fused multiply-add on either side (-ffp-contract=off, nvcc
// -fmad=false); where PyTorch's CPU kernels fuse one, the code says so with fused_multiply_add,
// which rounds once on every target (IEEE fusedMultiplyAdd).
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

// All ones where x < 0 as a signed 32-bit number (the sign bit set), else zero.
FSDP_HD uint32_t negative_mask(uint32_t x) {
  return static_cast<uint32_t>(static_cast<int32_t>(x) >> 31);
}

// The float16 conversions choose between their cases without branches, so a loop over an array
// of them vectorizes (memory/host): each case is exact integer arithmetic or one correctly rounded
// float operation, combined with masks. (With a select, the compiler moves the float operation
// under a branch, which it then may not flatten unless told -fno-trapping-math.)
FSDP_HD float to_float(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  const uint32_t zero_exponent = negative_mask(exponent - 1);
  // Zero or subnormal: mantissa * 2^-24, exact in float (0 for the other exponents).
  const uint32_t small =
      float_bits(static_cast<float>(mantissa & zero_exponent) * bits_float(0x33800000u));
  // Normal: rebias the exponent; all ones (inf, NaN) stays all ones.
  const uint32_t biased = exponent == 0x1f ? 0xffu : exponent + 112;
  const uint32_t normal = ((biased << 23) | (mantissa << 13)) & ~zero_exponent;
  return bits_float(sign | normal | small);
}

FSDP_HD Float16 to_float16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t magnitude = u & 0x7fffffffu;
  const uint32_t below_normal = negative_mask(magnitude - 0x38800000u);  // below 2^-14
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even. Rounding is
  // monotonic, so from 65520 up (infinity and NaN included) this is at least 0x7c00, infinity.
  uint32_t v = magnitude - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  const uint32_t normal = (v >> 13) & ~below_normal;
  // Below 2^-14 (a float16 subnormal or zero): 0.5 + |f| lies in [0.5, 1), where a float's ulp is
  // 2^-24, the float16 subnormal step, so the one rounding of that addition (to nearest even; 0.5
  // is an even number of steps) rounds |f| to its float16 subnormal, whose mantissa the sum's low
  // bits then hold (0x400: the smallest normal). Magnitudes below 2^-25 round to zero: they are
  // added as 0, so no float subnormal reaches the addition (slow on some CPUs).
  const uint32_t addend = magnitude & ~negative_mask(magnitude - (102u << 23));
  const uint32_t subnormal =
      (float_bits(bits_float(addend) + 0.5f) - 0x3f000000u) & below_normal;  // 0x3f000000: 0.5f
  uint32_t r = normal + subnormal;
  r = r < 0x7c00u ? r : 0x7c00u;  // >= 65520 rounds to infinity (and infinity stays)
  // NaN: quiet, top payload bits kept.
  const uint32_t nan = magnitude > 0x7f800000u ? 0x0200u | ((magnitude >> 13) & 0x3ffu) : 0u;
  return {static_cast<uint16_t>(sign | r | nan)};
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

// a * b + c rounded once. std::fma is the instruction where the target has one (the AVX2 kernels
// are compiled for FMA too, memory/host/kernel_isa.hpp) and a correctly rounded libm call where
// it has not; either way the same bits as the device's fma.
template <class T>
FSDP_HD T fused_multiply_add(T a, T b, T c) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return fmaf(a, b, c);
  else
    return fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// float64 on either side computes in double, everything else in float.
template <class A, class B>
using Compute =
    std::conditional_t<std::is_same_v<A, double> || std::is_same_v<B, double>, double, float>;

// A reduction's value as its reduce dtype In holds it, where it is stored into a wider Out (a
// bfloat16 reduce into float32 gradient shards): rounded to In, as PyTorch's reduce-scatter in
// reduce_dtype rounds its sum and then its division, and widened back. Where Out is no wider
// than In, `v` is left to the one rounding into Out.
template <class Out, class In, class C>
FSDP_HD C as_reduced(C v) {
  if constexpr (sizeof(Out) > sizeof(In))
    return static_cast<C>(widen(narrow<In>(v)));
  else
    return v;
}

// ---- Optimizer updates of one element (float or double), PyTorch's single-tensor order ----

// The scalars of an SGD update, converted once to the element type.
template <class T>
struct SgdCoefficients {
  T lr, wd, mu, keep;
  bool decay, momentum, nesterov, first_step, maximize;
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
          a.first_step,
          a.maximize};
}

// PyTorch: grad = maximize ? -grad : grad; grad += wd * p; buf = momentum * buf + (1 - dampening)
// * grad (buf = grad at the first step); grad = nesterov ? grad + momentum * buf : buf;
// p += -lr * grad.
template <class T>
FSDP_HD void sgd_update(T& p, T g, T* buf, const SgdCoefficients<T>& c) {
  T d = c.maximize ? -g : g;
  if (c.decay) d = d + c.wd * p;
  if (c.momentum) {
    *buf = c.first_step ? d : c.mu * *buf + c.keep * d;
    d = c.nesterov ? d + c.mu * *buf : *buf;
  }
  p = p + (-c.lr) * d;
}

// The scalars of an AdamW update, each computed in double as PyTorch computes it in Python and
// then rounded once to the element type, as PyTorch's kernels round a Python float argument.
// exp_avg.lerp_(grad, w) with w = 1 - beta1 computes, on PyTorch's vectorized CPU kernels (AVX2,
// AVX-512; at::native::lerp_vec), fma(w, grad - exp_avg, exp_avg) when |w| < 0.5 and
// fma(w - 1, grad - exp_avg, grad) otherwise: `lerp_weight` is w or w - 1 and `lerp_from_grad`
// says which base.
template <class T>
struct AdamWCoefficients {
  T decay, lerp_weight, b2, b2c, eps, step, bc2;
  bool lerp_from_grad, amsgrad, maximize;
};

template <class T>
AdamWCoefficients<T> adamw_coefficients(const AdamWArgs& a) {
  const T w = static_cast<T>(1.0 - a.beta1);
  const bool small = (w < T(0) ? -w : w) < T(0.5);  // at::native::is_lerp_weight_small
  return {static_cast<T>(1.0 - a.lr * a.weight_decay),
          small ? w : w - T(1),
          static_cast<T>(a.beta2),
          static_cast<T>(1.0 - a.beta2),
          static_cast<T>(a.eps),
          static_cast<T>(-(a.lr / a.bias_correction1)),
          static_cast<T>(a.bias_correction2_sqrt),
          !small,
          a.amsgrad,
          a.maximize};
}

// torch.maximum: NaN if either is NaN, else the larger (the first when equal, as std::max).
template <class T>
FSDP_HD T maximum(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// PyTorch's _single_tensor_adam (decoupled weight decay), operation by operation as its CPU
// kernels compute them where they are vectorized with FMA (AVX2, AVX-512), measured bit for bit
// (tests/check_optim_torch.py):
//   g = maximize ? -g : g                           grad = -grads[i]
//   p = p * (1 - lr wd)                             param.mul_(1 - lr * weight_decay)
//   m = lerp(m, g, 1 - beta1)                       exp_avg.lerp_(grad, 1 - beta1), fused (above)
//   v = fma((1 - beta2) g, g, v beta2)              exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
//                                                   1 - beta2): self + value * t1 * t2, contracted
//   amsgrad: vmax = maximum(vmax, v), and vmax replaces v below
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps      (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
//   p = p + (-(lr / (1 - beta1^t)) m) / denom       param.addcdiv_(exp_avg, denom, -step_size):
//                                                   self + value * t1 / t2, nothing to fuse
// `vmax` is read and written only with amsgrad.
template <class T>
FSDP_HD void adamw_update(T& p, T g, T& m, T& v, T& vmax, const AdamWCoefficients<T>& c) {
  if (c.maximize) g = -g;
  p = p * c.decay;
  m = fused_multiply_add(c.lerp_weight, g - m, c.lerp_from_grad ? g : m);
  v = fused_multiply_add(c.b2c * g, g, v * c.b2);
  if (c.amsgrad) vmax = maximum(vmax, v);
  const T second = c.amsgrad ? vmax : v;
#if defined(__CUDA_ARCH__)
  const T root = sqrt(second);  // correctly rounded (nvcc's default -prec-sqrt=true), as std::sqrt
#else
  const T root = std::sqrt(second);
#endif
  const T denom = root / c.bc2 + c.eps;
  p = p + (c.step * m) / denom;
}

}  // namespace fsdp::numeric
