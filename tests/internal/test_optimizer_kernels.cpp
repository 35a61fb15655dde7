// The host kernels, every instruction set's build (baseline, and AVX2 where the CPU has it),
// against scalar references written here from the documented formulas, bit for bit: AdamW (with
// and without AMSGrad and maximize) and SGD (every flag combination) in float32 and float64, the
// gradient norms' parts (the largest |x|, and the fixed-point sums of |x|^p), scale, the finiteness
// check, and the casts and scaled/accumulating stores between float32, float64, bfloat16 and
// float16. Lengths 0, 1, 7, 8, 9 and 1000003, arrays starting on and off a 64-byte boundary, inputs
// with NaN, infinities, subnormals, signed zeros and rounding ties. The references are plain loops
// compiled without contraction into fused multiply-adds (tests/CMakeLists.txt), in the precision
// the library documents.
//
// Equal bits everywhere, but where an operation meets two NaNs: IEEE leaves open which one it
// returns, so there only NaN-ness is compared (a conversion of one NaN must keep its bits).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "memory/host/host_kernels.hpp"
#include "memory/host/optimizer_kernels.hpp"

using namespace fsdp;

namespace {

int failures = 0, checks = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (ok) return;
  if (++failures <= 30) std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}

const std::size_t kLengths[] = {0, 1, 7, 8, 9, 1000003};

// ---- Bits ----

uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint64_t d2u(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// ---- Inputs ----

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  double unit() { return static_cast<double>(next() >> 11) / 9007199254740992.0; }  // [0, 1)
};

// Mostly ordinary values of either sign spread over a few decades (scaled by `scale`); every
// 11th a special one: signed zeros, infinities, NaN, subnormals of T, the largest finite T.
template <class T>
std::vector<T> values(std::size_t n, uint64_t seed, double scale, bool allow_negative = true) {
  Rng r{seed * 0x9E3779B97F4A7C15ull + 7};
  std::vector<T> out(n);
  const T specials[] = {T(0),
                        -T(0),
                        std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(),
                        std::numeric_limits<T>::quiet_NaN(),
                        std::numeric_limits<T>::denorm_min(),
                        -std::numeric_limits<T>::denorm_min() * T(3),
                        std::numeric_limits<T>::min() / T(5),  // subnormal
                        std::numeric_limits<T>::max()};
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t k = r.next();
    if (i % 11 == 5) {
      out[i] = specials[k % 9];
      continue;
    }
    double v = std::ldexp(r.unit() + 0.5, static_cast<int>(k % 13) - 6) * scale;
    if (allow_negative && (k >> 40) & 1) v = -v;
    out[i] = static_cast<T>(v);
  }
  return out;
}

// An array of n elements of `bytes` each, starting on a 64-byte boundary plus `offset` elements,
// inside a buffer of its own.
class Array {
 public:
  Array(std::size_t n, std::size_t bytes, std::size_t offset)
      : storage_(n * bytes + offset * bytes + 64), n_(n), bytes_(bytes) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - base % 64) % 64) + offset * bytes;
  }
  void* data() { return data_; }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  void fill(const void* src) {
    if (n_) std::memcpy(data_, src, n_ * bytes_);
  }

 private:
  std::vector<unsigned char> storage_;
  unsigned char* data_;
  std::size_t n_, bytes_;
};

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || f2u(a) == f2u(b);
}
bool same_float(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || d2u(a) == d2u(b);
}

template <class T>
bool same_array(const T* got, const std::vector<T>& want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!same_float(got[i], want[i])) {
      std::fprintf(stderr, "  first difference at %zu: %.17g, want %.17g\n", i,
                   static_cast<double>(got[i]), static_cast<double>(want[i]));
      return false;
    }
  return true;
}

template <class T>
DType dtype_of() {
  return sizeof(T) == 4 ? DType::Float32 : DType::Float64;
}

// ---- AdamW: PyTorch's single-tensor update, with decoupled weight decay ----

struct AdamWCase {
  double lr, wd, b1, b2, eps;
  int step;
  bool amsgrad, maximize;
};

// torch.maximum: NaN if either is NaN, else the larger.
template <class T>
T torch_maximum(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return std::max(a, b);
}

template <class T>
void ref_adamw(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& m, std::vector<T>& v,
               std::vector<T>& vmax, const AdamWCase& a) {
  // The scalars in double, as PyTorch computes them in Python (bias_correction2 ** 0.5 is pow),
  // then once to T. lerp_ and addcmul_ fused, one rounding each, as PyTorch's vectorized CPU
  // kernels compute them.
  const double bc1 = 1.0 - std::pow(a.b1, a.step);
  const double bc2 = std::pow(1.0 - std::pow(a.b2, a.step), 0.5);
  const T decay = static_cast<T>(1.0 - a.lr * a.wd), w = static_cast<T>(1.0 - a.b1);
  const T b2 = static_cast<T>(a.b2), b2c = static_cast<T>(1.0 - a.b2), eps = static_cast<T>(a.eps);
  const T step = static_cast<T>(-(a.lr / bc1)), bc2t = static_cast<T>(bc2);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const T gi = a.maximize ? -g[i] : g[i];  // grad = -grads[i] if maximize
    p[i] = p[i] * decay;                     // param.mul_(1 - lr * wd)
    // exp_avg.lerp_(grad, 1 - beta1): at::native::lerp_vec, two branches on |w| < 0.5
    m[i] = std::fabs(w) < T(0.5) ? std::fma(w, gi - m[i], m[i]) : std::fma(w - T(1), gi - m[i], gi);
    v[i] = std::fma(b2c * gi, gi, v[i] * b2);  // exp_avg_sq.mul_(b2).addcmul_(grad, grad, 1 - b2)
    T second = v[i];
    if (a.amsgrad) {  // torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
      vmax[i] = torch_maximum(vmax[i], v[i]);
      second = vmax[i];
    }
    const T denom = std::sqrt(second) / bc2t + eps;
    p[i] = p[i] + (step * m[i]) / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

template <class T>
void adamw_cases(const host::OptimizerKernelSet& k) {
  // The last: 1 - beta1 >= 0.5, lerp's other branch.
  const AdamWCase base[] = {{1e-3, 1e-2, 0.9, 0.999, 1e-8, 1, false, false},
                            {1e-3, 1e-2, 0.9, 0.999, 1e-8, 17, false, false},
                            {3e-2, 0.0, 0.8, 0.95, 1e-3, 3, false, false},
                            {1e-2, 0.1, 0.3, 0.9, 1e-8, 2, false, false}};
  uint64_t seed = 100;
  for (const std::size_t n : kLengths)
    for (const std::size_t offset : {0, 1})
      for (const AdamWCase& b : base)
        for (int flags = 0; flags < 4; ++flags) {
          AdamWCase c = b;
          c.amsgrad = (flags & 1) != 0, c.maximize = (flags & 2) != 0;
          auto p = values<T>(n, ++seed, 1.0), g = values<T>(n, ++seed, 0.01);
          auto m = values<T>(n, ++seed, 0.001), v = values<T>(n, ++seed, 1e-6, false);
          auto x = values<T>(n, ++seed, 1e-6, false);
          Array ap(n, sizeof(T), offset), ag(n, sizeof(T), offset), am(n, sizeof(T), offset),
              av(n, sizeof(T), offset), ax(n, sizeof(T), offset);
          ap.fill(p.data()), ag.fill(g.data()), am.fill(m.data()), av.fill(v.data());
          ax.fill(x.data());
          AdamWArgs args;
          args.lr = c.lr, args.weight_decay = c.wd, args.beta1 = c.b1, args.beta2 = c.b2;
          args.eps = c.eps, args.amsgrad = c.amsgrad, args.maximize = c.maximize;
          args.bias_correction1 = 1.0 - std::pow(c.b1, c.step);
          args.bias_correction2_sqrt = std::pow(1.0 - std::pow(c.b2, c.step), 0.5);
          // Without amsgrad the kernel gets no max_exp_avg_sq (it must not touch one).
          k.adamw_step(ap.data(), ag.data(), am.data(), av.data(), c.amsgrad ? ax.data() : nullptr,
                       n, dtype_of<T>(), args);
          ref_adamw(p, g, m, v, x, c);
          const std::string what = std::string(k.name) + " adamw " + dtype_name(dtype_of<T>()) +
                                   " n " + std::to_string(n) + " offset " + std::to_string(offset) +
                                   " step " + std::to_string(c.step) +
                                   (c.amsgrad ? " amsgrad" : "") + (c.maximize ? " maximize" : "");
          check(same_array(ap.as<T>(), p), what + ": param");
          check(same_array(am.as<T>(), m), what + ": exp_avg");
          check(same_array(av.as<T>(), v), what + ": exp_avg_sq");
          if (c.amsgrad) check(same_array(ax.as<T>(), x), what + ": max_exp_avg_sq");
          check(same_array(ag.as<T>(), g), what + ": the gradient untouched");
        }
}

// ---- SGD: PyTorch's single-tensor update ----

template <class T>
void ref_sgd(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& buf, const SgdArgs& a) {
  const T lr = static_cast<T>(a.lr), wd = static_cast<T>(a.weight_decay);
  const T mu = static_cast<T>(a.momentum), keep = static_cast<T>(1.0 - a.dampening);
  for (std::size_t i = 0; i < p.size(); ++i) {
    T d = g[i];
    if (a.maximize) d = -d;                        // grad = -grads[i]
    if (a.weight_decay != 0.0) d = d + wd * p[i];  // grad.add(param, alpha=wd)
    if (a.momentum != 0.0) {
      if (a.first_step)
        buf[i] = d;  // buf = clone(grad)
      else
        buf[i] = mu * buf[i] + keep * d;  // buf.mul_(momentum).add_(grad, alpha=1 - dampening)
      if (a.nesterov)
        d = d + mu * buf[i];  // grad.add(buf, alpha=momentum)
      else
        d = buf[i];
    }
    p[i] = p[i] + (-lr) * d;  // param.add_(grad, alpha=-lr)
  }
}

template <class T>
void sgd_cases(const host::OptimizerKernelSet& k) {
  uint64_t seed = 200;
  for (const std::size_t n : kLengths)
    for (const std::size_t offset : {0, 1})
      for (int flags = 0; flags < 64; ++flags) {
        SgdArgs a;
        a.lr = 0.05;
        a.weight_decay = flags & 1 ? 1e-2 : 0.0;
        a.momentum = flags & 2 ? 0.9 : 0.0;
        a.nesterov = (flags & 4) != 0;
        a.first_step = (flags & 8) != 0;
        a.dampening = flags & 16 ? 0.1 : 0.0;
        a.maximize = (flags & 32) != 0;
        if (!a.momentum && (a.nesterov || a.first_step || a.dampening != 0.0)) continue;
        if (n > 100 && flags % 3) continue;  // the long arrays: a third of the combinations
        auto p = values<T>(n, ++seed, 1.0), g = values<T>(n, ++seed, 0.01);
        auto buf = values<T>(n, ++seed, 0.01);
        Array ap(n, sizeof(T), offset), ag(n, sizeof(T), offset), ab(n, sizeof(T), offset);
        ap.fill(p.data()), ag.fill(g.data()), ab.fill(buf.data());
        k.sgd_step(ap.data(), ag.data(), a.momentum != 0.0 ? ab.data() : nullptr, n, dtype_of<T>(),
                   a);
        ref_sgd(p, g, buf, a);
        const std::string what = std::string(k.name) + " sgd " + dtype_name(dtype_of<T>()) + " n " +
                                 std::to_string(n) + " offset " + std::to_string(offset) +
                                 " flags " + std::to_string(flags);
        check(same_array(ap.as<T>(), p), what + ": param");
        check(same_array(ab.as<T>(), buf), what + ": momentum buffer");
      }
}

// ---- Norms, scale, finiteness ----

template <class T>
double ref_norm(const std::vector<T>& x, double p) {
  double acc = 0.0;
  if (std::isinf(p)) {
    for (const T e : x) {
      const double a = std::fabs(static_cast<double>(e));
      if (std::isnan(a)) return a;
      if (a > acc) acc = a;
    }
    return acc;
  }
  for (const T e : x) {  // one element after the other
    const double a = std::fabs(static_cast<double>(e));
    acc = acc + (p == 2.0 ? a * a : std::pow(a, p));
  }
  return acc;
}

// The fixed-point sum from its definition (memory/fixed_sum.hpp): each term |x|^p, scaled, rounded
// to the nearest integer (ties to even: nearbyint in the default rounding mode), the integers
// added one after the other, no split into parts.
template <class T>
__int128 ref_fixed_sum(const std::vector<T>& x, double p, fixed::Scale sc) {
  __int128 total = 0;
  for (const T e : x) {
    const double a = std::fabs(static_cast<double>(e));
    const double t = p == 2.0 ? a * a : p == 1.0 ? a : std::pow(a, p);
    total += static_cast<__int128>(std::nearbyint(t * sc.first * sc.second));
  }
  return total;
}

// The scale for x's largest term, as grad_norm.cpp picks it (the term's exponent plus one).
template <class T>
fixed::Scale scale_of(const std::vector<T>& x, double p) {
  double largest = 0.0;
  for (const T e : x) largest = std::max(largest, std::fabs(static_cast<double>(e)));
  int exponent = 0;
  std::frexp(fixed::norm_term(largest, p), &exponent);
  return fixed::scale_for(exponent + 1);
}

template <class T>
void reduction_cases(const host::OptimizerKernelSet& k) {
  uint64_t seed = 300;
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::size_t n : kLengths)
    for (const std::size_t offset : {0, 1}) {
      const std::string what = std::string(k.name) + " " + dtype_name(dtype_of<T>()) + " n " +
                               std::to_string(n) + " offset " + std::to_string(offset);
      // Finite inputs (specials replaced), then one special value at a time at the end, the
      // middle and the start.
      auto x = values<T>(n, ++seed, 1.0);
      for (T& e : x)
        if (!std::isfinite(e)) e = T(0.5);
      Array a(n, sizeof(T), offset);
      a.fill(x.data());
      const double largest = k.largest_abs(a.data(), n, dtype_of<T>());
      check(d2u(largest) == d2u(ref_norm(x, inf)), what + " largest |x|");
      for (const double p : {1.0, 2.0, 3.0}) {
        if (p == 3.0 && n > 1000) continue;  // std::pow per element: slow
        // No sum runs when a term is beyond double's range (grad_norm.cpp).
        if (!std::isfinite(ref_norm(x, p))) continue;
        // The fixed-point sum at the norm's scale, and at scales that put the terms far below
        // the integers (most round to 0 or 1) or near the top (2^70 over the largest).
        for (const int shift : {0, 40, -3}) {
          fixed::Scale sc = scale_of(x, p);
          sc.second = std::ldexp(sc.second, -shift);
          const __int128 fixed_got = k.norm_fixed_sum(a.data(), n, dtype_of<T>(), p, sc);
          check(
              fixed_got == ref_fixed_sum(x, p, sc),
              what + " fixed-point sum p=" + std::to_string(p) + " shift " + std::to_string(shift));
        }
      }
      check(k.all_finite(a.data(), n, dtype_of<T>()), what + " all_finite");
      const T specials[] = {std::numeric_limits<T>::infinity(), -std::numeric_limits<T>::infinity(),
                            std::numeric_limits<T>::quiet_NaN()};
      for (const std::size_t at : {n - 1, n / 2, std::size_t(0)}) {
        if (n == 0) break;
        for (const T s : specials) {
          std::vector<T> y = x;
          y[at] = s;
          a.fill(y.data());
          check(!k.all_finite(a.data(), n, dtype_of<T>()),
                what + " all_finite with a special at " + std::to_string(at));
          check(same_float(k.largest_abs(a.data(), n, dtype_of<T>()), ref_norm(y, inf)),
                what + " largest |x| with a special at " + std::to_string(at));
        }
      }
      // Subnormals and signed zeros are finite.
      auto z = values<T>(n, ++seed, 1.0);
      for (std::size_t i = 0; i < n; ++i)
        if (!std::isfinite(z[i])) z[i] = i % 2 ? -std::numeric_limits<T>::denorm_min() : -T(0);
      a.fill(z.data());
      check(k.all_finite(a.data(), n, dtype_of<T>()), what + " all_finite, subnormals");
      // Scale, specials included.
      for (const double f : {0.25, 1.0 / 3.0, -7.5e-3}) {
        const auto w = values<T>(n, ++seed, 1.0);
        a.fill(w.data());
        k.scale(a.data(), n, dtype_of<T>(), f);
        std::vector<T> want = w;
        for (T& e : want) e = e * static_cast<T>(f);
        check(same_array(a.as<T>(), want), what + " scale by " + std::to_string(f));
      }
    }
}

// ---- Casts and scaled stores, against rounding written from the definition ----

// x rounded to nearest, ties to even, to a binary format with `mantissa` stored bits, smallest
// normal exponent `emin` and largest finite value `max` (overflow: infinity). x finite.
double round_to_format(double x, int mantissa, int emin, double max) {
  if (x == 0.0) return x;
  int e;
  std::frexp(x, &e);                                     // |x| in [2^(e-1), 2^e)
  const int quantum = std::max(e - 1, emin) - mantissa;  // subnormals: a fixed quantum
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  return std::fabs(r) > max ? std::copysign(std::numeric_limits<double>::infinity(), x) : r;
}

// The 16-bit formats: bfloat16 (8 exponent bits, 7 mantissa bits), float16 (5 and 10).
struct Half {
  DType t;
  int mantissa, emin, exponent_bits;
  double max;
};
const Half kBf16 = {DType::BFloat16, 7, -126, 8, 0x1.fep127};
const Half kF16 = {DType::Float16, 10, -14, 5, 65504.0};

// float to the format, from its value; NaN: the sign, the quiet bit, the top payload bits kept.
uint16_t ref_narrow(float f, const Half& h) {
  const uint32_t u = f2u(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const int bias = (1 << (h.exponent_bits - 1)) - 1;
  const uint16_t inf = static_cast<uint16_t>(((1u << h.exponent_bits) - 1) << h.mantissa);
  if (std::isnan(f))
    return static_cast<uint16_t>(sign | inf | (1u << (h.mantissa - 1)) |
                                 ((u & 0x7fffffu) >> (23 - h.mantissa)));
  const double r = std::fabs(round_to_format(f, h.mantissa, h.emin, h.max));
  if (std::isinf(r)) return sign | inf;
  if (r == 0.0) return sign;
  int e;
  const double m = std::frexp(r, &e);  // r = m 2^e, m in [0.5, 1)
  if (e - 1 < h.emin)                  // subnormal: r / quantum
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(r, h.mantissa - h.emin)));
  const auto frac = static_cast<uint32_t>(std::ldexp(m * 2 - 1, h.mantissa));
  return static_cast<uint16_t>(sign | ((e - 1 + bias) << h.mantissa) | frac);
}

float ref_widen(uint16_t b, const Half& h) {
  const int bias = (1 << (h.exponent_bits - 1)) - 1;
  const uint32_t exponent = (b >> h.mantissa) & ((1u << h.exponent_bits) - 1);
  const uint32_t mantissa = b & ((1u << h.mantissa) - 1);
  const float sign = b & 0x8000 ? -1.0f : 1.0f;
  if (exponent == (1u << h.exponent_bits) - 1) {
    if (mantissa == 0) return sign * std::numeric_limits<float>::infinity();
    // NaN: its payload moved to the top of float's, the sign kept.
    return u2f((b & 0x8000u) << 16 | 0x7f800000u | mantissa << (23 - h.mantissa));
  }
  if (exponent == 0) return sign * static_cast<float>(std::ldexp(mantissa, h.emin - h.mantissa));
  return sign * static_cast<float>(
                    std::ldexp(1.0 + std::ldexp(mantissa, -h.mantissa), int(exponent) - bias));
}

// Values of every dtype as doubles, and back, per the library's rules: 16-bit values widen to
// float, narrowing to them goes through float.
struct Elements {
  DType t;
  std::vector<unsigned char> raw;
};

double get(const Elements& e, std::size_t i) {
  const unsigned char* at = e.raw.data() + i * dtype_size(e.t);
  switch (e.t) {
    case DType::Float32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    case DType::Float64: {
      double d;
      std::memcpy(&d, at, 8);
      return d;
    }
    default: {
      uint16_t b;
      std::memcpy(&b, at, 2);
      return ref_widen(b, e.t == DType::BFloat16 ? kBf16 : kF16);
    }
  }
}

void put(Elements& e, std::size_t i, double v) {
  unsigned char* at = e.raw.data() + i * dtype_size(e.t);
  switch (e.t) {
    case DType::Float32: {
      const float f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
      break;
    }
    case DType::Float64: std::memcpy(at, &v, 8); break;
    default: {
      const uint16_t b = ref_narrow(static_cast<float>(v), e.t == DType::BFloat16 ? kBf16 : kF16);
      std::memcpy(at, &b, 2);
    }
  }
}

// n elements of dtype t: ordinary values, exact ties of the narrower formats, specials.
Elements elements(DType t, std::size_t n, uint64_t seed) {
  Elements e{t, std::vector<unsigned char>(n * dtype_size(t))};
  const auto v = values<double>(n, seed, 1.0);
  Rng r{seed + 11};
  for (std::size_t i = 0; i < n; ++i) {
    double x = v[i];
    const uint64_t k = r.next();
    if (i % 11 == 5 && k % 3 == 0) x = 1e-40;  // a float subnormal
    if (i % 11 == 5 && k % 3 == 1) x = -6e-8;  // near float16's smallest subnormal
    if (i % 13 == 4) x = std::ldexp(1.0 + std::ldexp(double(k % 2048 | 1), -11), -(int)(k % 30));
    if (i % 17 == 8) x = 65520.0 * (k % 2 ? 1 : -1);  // float16's overflow tie
    if (t == DType::Float32 || t == DType::Float64) {
      if (t == DType::Float64) {
        std::memcpy(e.raw.data() + i * 8, &x, 8);
      } else {
        const float f = static_cast<float>(x);
        std::memcpy(e.raw.data() + i * 4, &f, 4);
      }
    } else {
      // Any 16-bit pattern from the value's float bits' top half, plus a random pattern now and
      // then (every exponent, NaN payloads included).
      uint16_t b = static_cast<uint16_t>(f2u(static_cast<float>(x)) >> 16);
      if (t == DType::Float16) b = ref_narrow(static_cast<float>(x), kF16);
      if (i % 7 == 2) b = static_cast<uint16_t>(k >> 20);
      std::memcpy(e.raw.data() + i * 2, &b, 2);
    }
  }
  return e;
}

bool is_nan_bits(const unsigned char* at, DType t) {
  if (t == DType::Float64) {
    double d;
    std::memcpy(&d, at, 8);
    return std::isnan(d);
  }
  if (t == DType::Float32) {
    float f;
    std::memcpy(&f, at, 4);
    return std::isnan(f);
  }
  uint16_t b;
  std::memcpy(&b, at, 2);
  return (b & 0x7fff) > (t == DType::BFloat16 ? 0x7f80 : 0x7c00);
}

// Equal bits; where `nan_free` (results of arithmetic on possibly two NaNs), any NaN for a NaN.
bool same_elements(const unsigned char* got, const Elements& want, std::size_t n, bool nan_free) {
  const std::size_t w = dtype_size(want.t);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char* g = got + i * w;
    const unsigned char* x = want.raw.data() + i * w;
    if (nan_free && is_nan_bits(g, want.t) && is_nan_bits(x, want.t)) continue;
    if (std::memcmp(g, x, w) != 0) {
      uint64_t gb = 0, xb = 0;
      std::memcpy(&gb, g, w), std::memcpy(&xb, x, w);
      std::fprintf(stderr, "  first difference at %zu: bits %llx, want %llx\n", i,
                   static_cast<unsigned long long>(gb), static_cast<unsigned long long>(xb));
      return false;
    }
  }
  return true;
}

// The type computed in: double where either side is float64, else float.
double compute(double v, DType a, DType b) {
  return a == DType::Float64 || b == DType::Float64 ? v : static_cast<float>(v);
}

// A reduction's value stored into a wider out_t: rounded to in_t, its reduce dtype, first
// (the sum and the division each; memory/numeric.hpp's as_reduced).
double as_reduced(double v, DType in_t, DType out_t) {
  if (dtype_size(out_t) <= dtype_size(in_t)) return v;
  if (in_t == DType::Float32) return static_cast<float>(v);
  const Half& h = in_t == DType::BFloat16 ? kBf16 : kF16;
  return ref_widen(ref_narrow(static_cast<float>(v), h), h);
}

void cast_cases(const host::KernelSet& k) {
  const DType types[4] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16};
  for (const std::size_t n : kLengths) {
    std::vector<Elements> xs, ys, starts;  // per dtype
    for (int t = 0; t < 4; ++t) {
      xs.push_back(elements(types[t], n, 400 + 3 * t));
      ys.push_back(elements(types[t], n, 401 + 3 * t));
      starts.push_back(elements(types[t], n, 402 + 3 * t));
    }
    for (int o = 0; o < 4; ++o)
      for (int in = 0; in < 4; ++in) {
        const DType out_t = types[o], in_t = types[in];
        const Elements &x = xs[in], &y = ys[in], &start = starts[o];
        for (const std::size_t offset : {0, 1}) {
          const std::string what = std::string(k.name) + " " + dtype_name(in_t) + " -> " +
                                   dtype_name(out_t) + " n " + std::to_string(n) + " offset " +
                                   std::to_string(offset);
          Array a(n, dtype_size(out_t), offset);
          Array xa(n, dtype_size(in_t), offset), ya(n, dtype_size(in_t), offset);
          xa.fill(x.raw.data()), ya.fill(y.raw.data());
          // convert: one rounding (16-bit targets: through float, as documented).
          Elements want = start;
          for (std::size_t i = 0; i < n; ++i) put(want, i, compute(get(x, i), in_t, out_t));
          if (out_t == DType::Float32 && dtype_size(in_t) == 2)  // exact: signaling NaNs stay
            for (std::size_t i = 0; i < n; ++i) {
              uint16_t b;
              std::memcpy(&b, x.raw.data() + 2 * i, 2);
              const float f = ref_widen(b, in_t == DType::BFloat16 ? kBf16 : kF16);
              std::memcpy(want.raw.data() + 4 * i, &f, 4);
            }
          k.convert(a.data(), out_t, xa.data(), in_t, n);
          check(same_elements(static_cast<unsigned char*>(a.data()), want, n, false),
                what + " convert");
          // The long arrays' scaled stores: the pairs with float32, off the boundary.
          if (n > 100000 &&
              (offset == 0 || out_t == in_t || (in_t != DType::Float32 && out_t != DType::Float32)))
            continue;
          for (const double d : {1.0, 2.0, 3.0})
            for (const Store st : {Store::Assign, Store::Accumulate}) {
              if (n > 100000 && d == 1.0) continue;
              const bool acc = st == Store::Accumulate;
              // scaled: out (+)= x / d, in the compute type, as in_t holds it.
              for (std::size_t i = 0; i < n; ++i) {
                const double q = as_reduced(
                    d == 1.0 ? compute(get(x, i), in_t, out_t)
                             : compute(compute(get(x, i), in_t, out_t) / compute(d, in_t, out_t),
                                       in_t, out_t),
                    in_t, out_t);
                put(want, i, acc ? compute(get(start, i) + q, in_t, out_t) : q);
              }
              a.fill(start.raw.data());
              k.scaled(a.data(), out_t, xa.data(), in_t, n, d, st);
              const std::string how =
                  " divisor " + std::to_string(int(d)) + (acc ? " accumulate" : " assign");
              check(same_elements(static_cast<unsigned char*>(a.data()), want, n, true),
                    what + " scaled" + how);
              // add_pair_scaled: out (+)= (x + y) / d, each as in_t holds it.
              for (std::size_t i = 0; i < n; ++i) {
                const double s = as_reduced(
                    compute(compute(get(x, i), in_t, out_t) + compute(get(y, i), in_t, out_t), in_t,
                            out_t),
                    in_t, out_t);
                const double q = as_reduced(
                    d == 1.0 ? s : compute(s / compute(d, in_t, out_t), in_t, out_t), in_t, out_t);
                put(want, i, acc ? compute(get(start, i) + q, in_t, out_t) : q);
              }
              a.fill(start.raw.data());
              k.add_pair_scaled(a.data(), out_t, xa.data(), ya.data(), in_t, n, d, st);
              check(same_elements(static_cast<unsigned char*>(a.data()), want, n, true),
                    what + " add_pair_scaled" + how);
            }
        }
      }
  }
}

// Every 16-bit pattern widened, against the definition; every 997th float (and more around
// float16's subnormals, its overflow and bfloat16's) narrowed.
void exhaustive_16(const host::KernelSet& k) {
  for (const Half* h : {&kBf16, &kF16}) {
    std::vector<uint16_t> all(65536);
    for (uint32_t b = 0; b < 65536; ++b) all[b] = static_cast<uint16_t>(b);
    std::vector<float> wide(65536);
    k.convert(wide.data(), DType::Float32, all.data(), h->t, 65536);
    bool ok = true;
    for (uint32_t b = 0; b < 65536 && ok; ++b) {
      const float want = ref_widen(static_cast<uint16_t>(b), *h);
      ok = f2u(wide[b]) == f2u(want);
      if (!ok)
        std::fprintf(stderr, "  %04x widens to %08x, want %08x\n", b, f2u(wide[b]), f2u(want));
    }
    check(ok, std::string(k.name) + " every " + dtype_name(h->t) + " widened");
    std::vector<float> in;
    for (uint64_t u = 0; u < (1ull << 32); u += 997) in.push_back(u2f(static_cast<uint32_t>(u)));
    for (uint32_t u = 0x33000000u - 4096; u < 0x38800000u + 4096; u += 61) in.push_back(u2f(u));
    for (uint32_t u = 0x477fe000u; u < 0x47801000u; ++u) in.push_back(u2f(u));
    for (uint32_t u = 0x7f7f0000u; u < 0x7f800010u; ++u) in.push_back(u2f(u));
    const std::size_t count = in.size();
    for (std::size_t i = 0; i < count; ++i) in.push_back(-in[i]);
    std::vector<uint16_t> narrow(in.size());
    k.convert(narrow.data(), h->t, in.data(), DType::Float32, in.size());
    ok = true;
    for (std::size_t i = 0; i < in.size() && ok; ++i) {
      const uint16_t want = ref_narrow(in[i], *h);
      ok = narrow[i] == want;
      if (!ok)
        std::fprintf(stderr, "  %08x narrows to %04x, want %04x\n", f2u(in[i]), narrow[i], want);
    }
    check(ok, std::string(k.name) + " float32 narrowed to " + dtype_name(h->t));
  }
}

}  // namespace

int main() {
  std::vector<const host::OptimizerKernelSet*> optimizer_sets = {
      &host::baseline_optimizer_kernels()};
  std::vector<const host::KernelSet*> cast_sets = {&host::baseline_kernels()};
  if (host::avx2_optimizer_kernels()) optimizer_sets.push_back(host::avx2_optimizer_kernels());
  if (host::avx2_kernels()) cast_sets.push_back(host::avx2_kernels());
  for (const host::OptimizerKernelSet* k : optimizer_sets) {
    adamw_cases<float>(*k);
    adamw_cases<double>(*k);
    sgd_cases<float>(*k);
    sgd_cases<double>(*k);
    reduction_cases<float>(*k);
    reduction_cases<double>(*k);
  }
  for (const host::KernelSet* k : cast_sets) {
    exhaustive_16(*k);
    cast_cases(*k);
  }
  std::printf("test_optimizer_kernels: %d checks, %d failed; sets: %s%s, active %s and %s\n",
              checks, failures, host::baseline_optimizer_kernels().name,
              host::avx2_optimizer_kernels() ? " and avx2" : " only",
              host::active_optimizer_kernels().name, host::active_kernels().name);
  return failures ? 1 : 0;
}
