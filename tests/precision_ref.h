/* Reference rounding to bfloat16 and float16, written for the tests independently of the
 * library: round-to-nearest-even through double arithmetic (rint), no bit tricks. */
#ifndef FSDP_TEST_PRECISION_REF_H
#define FSDP_TEST_PRECISION_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  int mantissa_bits; /* including the implicit one */
  int emin;          /* exponent of the smallest normal */
  int emax;          /* exponent of the largest finite */
} ref_format_t;

static const ref_format_t REF_BF16 = {8, -126, 127};
static const ref_format_t REF_F16 = {11, -14, 15};

/* The value x rounds to (x finite or not). */
static double ref_round(double x, ref_format_t f) {
  if (isnan(x) || isinf(x) || x == 0.0) return x;
  int k = 0;
  frexp(fabs(x), &k); /* |x| = m 2^k, m in [0.5, 1): exponent k - 1 */
  int e = k - 1;
  if (e < f.emin) e = f.emin;
  const double ulp = ldexp(1.0, e - (f.mantissa_bits - 1));
  const double r = rint(fabs(x) / ulp) * ulp; /* ties to even in the default rounding mode */
  const double max = ldexp(2.0 - ldexp(1.0, 1 - f.mantissa_bits), f.emax);
  const double v = r > max ? INFINITY : r;
  return x < 0 ? -v : v;
}

/* 16-bit patterns to double: sign, exponent, mantissa decoded by the formulas of the formats. */
static double ref_decode(uint16_t bits, ref_format_t f) {
  const int mbits = f.mantissa_bits - 1, ebits = 15 - mbits, bias = (1 << (ebits - 1)) - 1;
  const int sign = bits >> 15, exponent = (bits >> mbits) & ((1 << ebits) - 1);
  const int mantissa = bits & ((1 << mbits) - 1);
  double v;
  if (exponent == (1 << ebits) - 1)
    v = mantissa ? NAN : INFINITY;
  else if (exponent == 0)
    v = ldexp((double)mantissa, 1 - bias - mbits);
  else
    v = ldexp((double)(mantissa | (1 << mbits)), exponent - bias - mbits);
  return sign ? -v : v;
}

/* The 16-bit pattern of a value exactly representable in the format (found by search). */
static uint16_t ref_encode(double v, ref_format_t f) {
  for (uint32_t b = 0; b < 65536; ++b)
    if (ref_decode((uint16_t)b, f) == v && (signbit(v) != 0) == (b >> 15 != 0)) return (uint16_t)b;
  return 0x7fff;
}

static int same_value(double a, double b) {
  return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b));
}

#endif
