// The host kernels' AVX2 build against their baseline build, bit for bit (a NaN result may carry
// another NaN's sign and payload, see same()): every pair of dtypes,
// divisors 1, 2 (by the exact inverse), 3 and 4, assigning and accumulating stores, lengths
// around every vector width, and inputs full of rounding ties, subnormals, signed zeros,
// infinities and NaNs. The float32 sums are also checked against a plain scalar loop written
// here. Skipped (77) where the CPU or the build has no AVX2 variant.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "memory/host/host_kernels.hpp"

using namespace fsdp;

namespace {

int failures = 0, checks = 0;

void check(bool ok, const char* what, DType out, DType in, std::size_t n, double divisor,
           Store store) {
  ++checks;
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAILED: %s (out %s, in %s, n %zu, divisor %g, %s)\n", what, dtype_name(out),
               dtype_name(in), n, divisor, store == Store::Assign ? "assign" : "accumulate");
}

// Raw bit patterns of dtype t: every 7th element a special value, the others random bits that
// are mostly ordinary numbers (the exponent kept in a middle band), so sums round all ways.
std::vector<unsigned char> pattern(DType t, std::size_t n, uint64_t seed) {
  std::vector<unsigned char> out(n * dtype_size(t));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&s] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  };
  for (std::size_t i = 0; i < n; ++i) {
    uint64_t r = next();
    unsigned char* at = out.data() + i * dtype_size(t);
    const int special = i % 7 == 3 ? static_cast<int>(r % 6) : -1;
    if (t == DType::Float32 || t == DType::Float64) {
      double v = std::ldexp(static_cast<double>(r >> 11) / 9007199254740992.0 - 0.5,
                            static_cast<int>(r % 17) - 8);
      const double specials[6] = {0.0,
                                  -0.0,
                                  std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN(),
                                  t == DType::Float32 ? 1e-40 : 1e-310,  // subnormal
                                  -std::numeric_limits<double>::infinity()};
      if (special >= 0) v = specials[special];
      if (t == DType::Float32) {
        const float f = static_cast<float>(v);
        std::memcpy(at, &f, 4);
      } else {
        std::memcpy(at, &v, 8);
      }
    } else {
      // 16-bit: sign, a middle exponent band and random mantissa bits; or a special pattern.
      const uint16_t band = t == DType::BFloat16 ? 0x3C00 : 0x3000;
      uint16_t bits = static_cast<uint16_t>((r & 0x80FF) | (band + ((r >> 16) & 0x0700)));
      const uint16_t bf_specials[6] = {0x0000, 0x8000, 0x7F80, 0x7FC0, 0x0001, 0xFF80};
      const uint16_t h_specials[6] = {0x0000, 0x8000, 0x7C00, 0x7E00, 0x0001, 0xFC00};
      if (special >= 0) bits = t == DType::BFloat16 ? bf_specials[special] : h_specials[special];
      std::memcpy(at, &bits, 2);
    }
  }
  return out;
}

bool is_nan(const unsigned char* at, DType t) {
  if (t == DType::Float64) {
    uint64_t b;
    std::memcpy(&b, at, 8);
    return (b & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
  }
  if (t == DType::Float32) {
    uint32_t b;
    std::memcpy(&b, at, 4);
    return (b & 0x7FFFFFFFu) > 0x7F800000u;
  }
  uint16_t b;
  std::memcpy(&b, at, 2);
  return (b & 0x7FFF) > (t == DType::BFloat16 ? 0x7F80 : 0x7C00);
}

// Equal bits, except that where both are NaN their sign and payload may differ: IEEE leaves open
// which NaN an operation on two NaNs returns, and a compiler may swap the operands of an addition.
bool same(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b, DType t) {
  const std::size_t w = dtype_size(t);
  for (std::size_t i = 0; i < a.size(); i += w) {
    const bool na = is_nan(&a[i], t), nb = is_nan(&b[i], t);
    if (na != nb || (!na && std::memcmp(&a[i], &b[i], w) != 0)) return false;
  }
  return true;
}

void compare_all(const host::KernelSet& a, const host::KernelSet& b) {
  const DType types[4] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16};
  const std::size_t lengths[] = {1, 7, 8, 15, 16, 17, 31, 33, 64, 100, 1000, 4099};
  const double divisors[] = {1.0, 2.0, 3.0, 4.0};
  const Store stores[] = {Store::Assign, Store::Accumulate};
  uint64_t seed = 1;
  for (DType out : types)
    for (DType in : types)
      for (std::size_t n : lengths) {
        const auto x = pattern(in, n, ++seed), y = pattern(in, n, ++seed);
        const auto start = pattern(out, n, ++seed);
        for (double d : divisors)
          for (Store st : stores) {
            auto oa = start, ob = start;
            a.add_pair_scaled(oa.data(), out, x.data(), y.data(), in, n, d, st);
            b.add_pair_scaled(ob.data(), out, x.data(), y.data(), in, n, d, st);
            check(same(oa, ob, out), "add_pair_scaled", out, in, n, d, st);
            oa = start, ob = start;
            a.scaled(oa.data(), out, x.data(), in, n, d, st);
            b.scaled(ob.data(), out, x.data(), in, n, d, st);
            check(same(oa, ob, out), "scaled", out, in, n, d, st);
          }
        auto ca = start, cb = start;
        a.convert(ca.data(), out, x.data(), in, n);
        b.convert(cb.data(), out, x.data(), in, n);
        check(same(ca, cb, out), "convert", out, in, n, 1.0, Store::Assign);
        if (out == in) {
          auto sa = x, sb = x;
          a.add_into(sa.data(), y.data(), n, in);
          b.add_into(sb.data(), y.data(), n, in);
          check(same(sa, sb, in), "add_into", out, in, n, 1.0, Store::Accumulate);
        }
      }
}

// float32 (a + b) / 3 and (a + b) * 0.5 assigned, against a scalar loop written here.
void against_scalar(const host::KernelSet& k) {
  const std::size_t n = 1037;
  const auto xa = pattern(DType::Float32, n, 91), ya = pattern(DType::Float32, n, 92);
  std::vector<float> x(n), y(n), got(n), want(n);
  std::memcpy(x.data(), xa.data(), n * 4);
  std::memcpy(y.data(), ya.data(), n * 4);
  for (double d : {3.0, 2.0}) {
    for (std::size_t i = 0; i < n; ++i) {
      volatile float sum = x[i] + y[i];  // rounded to float, as the kernels do
      want[i] = d == 2.0 ? sum * 0.5f : sum / 3.0f;
    }
    k.add_pair_scaled(got.data(), DType::Float32, x.data(), y.data(), DType::Float32, n, d,
                      Store::Assign);
    check(std::memcmp(got.data(), want.data(), n * 4) == 0, k.name, DType::Float32, DType::Float32,
          n, d, Store::Assign);
  }
}

}  // namespace

int main() {
  const host::KernelSet* avx2 = host::avx2_kernels();
  against_scalar(host::baseline_kernels());
  if (!avx2) {
    std::printf("test_host_kernels: no AVX2 variant here (CPU or build); skipped\n");
    return failures ? 1 : 77;
  }
  against_scalar(*avx2);
  compare_all(host::baseline_kernels(), *avx2);
  std::printf("test_host_kernels: %d checks, %d failed; active set: %s\n", checks, failures,
              host::active_kernels().name);
  if (&host::active_kernels() != avx2) {
    std::fprintf(stderr, "FAILED: the CPU has AVX2 but the kernels in use are %s\n",
                 host::active_kernels().name);
    return 1;
  }
  return failures ? 1 : 0;
}
