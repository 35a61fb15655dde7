// Sums of many nonnegative doubles that do not depend on how the terms are split or ordered: the
// terms |x|^p of a gradient norm, which ranks, threads and CUDA blocks each hold a part of. Every
// term is scaled by a power of two chosen from a bound on the largest (so that each lies below
// 2^kTop), rounded to an integer (to nearest, ties to even), and the integers are added exactly.
// Integer addition is associative, so any rank count, any shard split, any loop or block layout
// gives the same total, hence the same bits. The price is the rounding of each term to a whole
// unit of 2^-kTop of the bound: at most half a unit per term, so for n terms the total is within
// n/2 units of the exact sum; the bound is at most 4 times the largest term (grad_norm.cpp), so
// relative to the sum that is at most n * 2^-(kTop-1): 2e-12 for 1e9 terms.
//
// To add on a vector unit (and a GPU) without 128-bit arithmetic per term, a scaled term s is
// split into high * 2^kHalf + low, both whole numbers of magnitude at most 2^kHalf (split): up to
// kExactTerms of either add exactly in a double, in any order, and the partial sums then go into
// 64-bit and 128-bit integers.
#pragma once

#include <cmath>
#include <cstddef>

#include "memory/numeric.hpp"

namespace fsdp::fixed {

constexpr int kTop = 70;   // scaled terms lie below 2^kTop
constexpr int kHalf = 35;  // s = high * 2^kHalf + low
// Whole numbers of magnitude at most 2^kHalf: 2^16 of them sum below 2^51, exact in a double.
constexpr std::size_t kExactTerms = std::size_t{1} << 16;

// The factor 2^(kTop - exponent) a term below 2^exponent is scaled by, as two factors that are each
// finite (exponent may be near either end of double's range); multiplying by one, then the
// other, is exact but for terms that become subnormal, which round alike everywhere.
struct Scale {
  double first, second;
};

inline Scale scale_for(int exponent) {
  const int total = kTop - exponent, half = total / 2;
  return {std::ldexp(1.0, half), std::ldexp(1.0, total - half)};
}

// high: s rounded to a multiple of 2^kHalf, divided by it; low: the rest (exact), rounded to an
// integer. Adding 1.5 * 2^(52+k) puts s in the binade whose spacing is 2^k, so the sum rounds s to
// a multiple of 2^k (to nearest, ties to even) and subtracting it back is exact. For 0 <= s <
// 2^kTop: 0 <= high <= 2^kHalf and |low| <= 2^(kHalf-1); high * 2^kHalf + low is s rounded to the
// nearest integer.
FSDP_HD void split(double s, double& high, double& low) {
  constexpr double kToHigh = 0x1.8p87;  // 1.5 * 2^(52 + kHalf)
  constexpr double kToInteger = 0x1.8p52;
  const double h = (s + kToHigh) - kToHigh;
  low = ((s - h) + kToInteger) - kToInteger;
  high = h * 0x1p-35;
}

// A norm's term |x|^p of a = |x|: a * a for p = 2 (exact for float32 x), a itself for p = 1.
FSDP_HD double norm_term(double a, double p) {
#if defined(__CUDA_ARCH__)
  return p == 2.0 ? a * a : p == 1.0 ? a : pow(a, p);
#else
  return p == 2.0 ? a * a : p == 1.0 ? a : std::pow(a, p);
#endif
}

}  // namespace fsdp::fixed
