#include "memory/host/optimizer_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/error.hpp"
#include "memory/dtype_dispatch.hpp"
#include "memory/fixed_sum.hpp"
#include "memory/host/kernel_isa.hpp"
#include "memory/numeric.hpp"

namespace fsdp::host {
namespace {

// f(std::true_type) or f(std::false_type): a runtime flag made a template argument, so the loop
// it selects has no branch inside.
template <class F>
void with_flag(bool flag, F&& f) {
  if (flag)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// The element updates are memory/numeric.hpp's, shared with the CUDA kernels, applied to local
// copies (each array is then loaded and stored once per element). The flags are template
// arguments, written into each loop's copy of the coefficients, so their branches fold away.
template <class T, bool Maximize, bool Decay, bool Momentum, bool Nesterov, bool First>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict buf, std::size_t n,
              numeric::SgdCoefficients<T> c) {
  c.maximize = Maximize, c.decay = Decay, c.momentum = Momentum, c.nesterov = Nesterov;
  c.first_step = First;
  for (std::size_t i = 0; i < n; ++i) {
    T pi = p[i], bi = T(0);
    if constexpr (Momentum && !First) bi = buf[i];
    numeric::sgd_update(pi, g[i], Momentum ? &bi : nullptr, c);
    p[i] = pi;
    if constexpr (Momentum) buf[i] = bi;
  }
}

template <class T>
void sgd(T* p, const T* g, T* buf, std::size_t n, const SgdArgs& a) {
  const numeric::SgdCoefficients<T> c = numeric::sgd_coefficients<T>(a);
  with_flag(c.maximize, [&](auto maximize) {
    constexpr bool Max = decltype(maximize)::value;
    with_flag(c.decay, [&](auto decay) {
      constexpr bool Decay = decltype(decay)::value;
      if (!c.momentum) return sgd_loop<T, Max, Decay, false, false, false>(p, g, buf, n, c);
      with_flag(c.nesterov, [&](auto nesterov) {
        with_flag(c.first_step, [&](auto first) {
          sgd_loop<T, Max, Decay, true, decltype(nesterov)::value, decltype(first)::value>(
              p, g, buf, n, c);
        });
      });
    });
  });
}

template <class T, bool Amsgrad, bool Maximize, bool LerpFromGrad>
void adamw_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                T* __restrict vmax, std::size_t n, numeric::AdamWCoefficients<T> c) {
  c.amsgrad = Amsgrad, c.maximize = Maximize, c.lerp_from_grad = LerpFromGrad;
  for (std::size_t i = 0; i < n; ++i) {
    T pi = p[i], mi = m[i], vi = v[i], xi = T(0);
    if constexpr (Amsgrad) xi = vmax[i];
    numeric::adamw_update(pi, g[i], mi, vi, xi, c);
    p[i] = pi, m[i] = mi, v[i] = vi;
    if constexpr (Amsgrad) vmax[i] = xi;
  }
}

template <class T>
void adamw(T* p, const T* g, T* m, T* v, T* vmax, std::size_t n, const AdamWArgs& a) {
  const numeric::AdamWCoefficients<T> c = numeric::adamw_coefficients<T>(a);
  with_flag(c.amsgrad, [&](auto amsgrad) {
    with_flag(c.maximize, [&](auto maximize) {
      with_flag(c.lerp_from_grad, [&](auto from_grad) {
        adamw_loop<T, decltype(amsgrad)::value, decltype(maximize)::value,
                   decltype(from_grad)::value>(p, g, m, v, vmax, n, c);
      });
    });
  });
}

// The unsigned integer of T's width, and x's bits as one.
template <class T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
template <class T>
Bits<T> bits_of(const T& x) {
  Bits<T> b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
template <class T>
constexpr Bits<T> exponent_mask() {
  return sizeof(T) == 4 ? Bits<T>(0x7f800000u) : Bits<T>(0x7ff0000000000000ull);
}

// max |x| as the largest of the bit patterns with the sign cleared: they order as the values do,
// with every NaN above infinity, so the maximum is exact in any order and a NaN wins (the one of
// the largest payload).
template <class T>
double max_abs(const T* __restrict x, std::size_t n) {
  const Bits<T> magnitude = ~Bits<T>(0) >> 1;
  Bits<T> best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Bits<T> b = bits_of(x[i]) & magnitude;
    best = b > best ? b : best;
  }
  T r;
  std::memcpy(&r, &best, sizeof r);
  return static_cast<double>(r);
}

// Term x of the fixed-point sum of |x|^p, scaled by sc (P: 1, 2, or 0 for any other p).
template <int P, class T>
inline double scaled_term(T x, double p, fixed::Scale sc) {
  const double a = std::fabs(static_cast<double>(x));
  return (P == 2 ? a * a : P == 1 ? a : fixed::norm_term(a, p)) * sc.first * sc.second;
}

// The fixed-point sum of |x|^p (memory/fixed_sum.hpp), scaled by sc. Blocks of kExactTerms terms
// are added in W double accumulators each (whole numbers: exact, so the lanes may be vectorized),
// then carried into integers.
template <class T, int P>
__int128 fixed_sum_loop(const T* __restrict x, std::size_t n, double p, fixed::Scale sc) {
  constexpr std::size_t W = 8;
  __int128 total = 0;
  for (std::size_t b = 0; b < n; b += fixed::kExactTerms) {
    const std::size_t e = std::min(n, b + fixed::kExactTerms);
    double high[W] = {}, low[W] = {};
    std::size_t i = b;
    for (; i + W <= e; i += W) {
      double s[W];
      for (std::size_t j = 0; j < W; ++j) s[j] = scaled_term<P>(x[i + j], p, sc);
      for (std::size_t j = 0; j < W; ++j) {
        double h, l;
        fixed::split(s[j], h, l);
        high[j] += h;
        low[j] += l;
      }
    }
    for (; i < e; ++i) {
      double h, l;
      fixed::split(scaled_term<P>(x[i], p, sc), h, l);
      high[0] += h;
      low[0] += l;
    }
    int64_t h = 0, l = 0;
    for (std::size_t j = 0; j < W; ++j) {
      h += static_cast<int64_t>(high[j]);
      l += static_cast<int64_t>(low[j]);
    }
    total += static_cast<__int128>(h) * (__int128{1} << fixed::kHalf) + l;
  }
  return total;
}

template <class T>
__int128 fixed_norm_sum(const T* x, std::size_t n, double p, fixed::Scale sc) {
  if (p == 2.0) return fixed_sum_loop<T, 2>(x, n, p, sc);
  if (p == 1.0) return fixed_sum_loop<T, 1>(x, n, p, sc);
  return fixed_sum_loop<T, 0>(x, n, p, sc);
}

template <class T>
void scale_by(T* __restrict x, std::size_t n, double factor) {
  const T f = static_cast<T>(factor);
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] * f;
}

// No early exit: or-ing a flag per element keeps the loop straight-line.
template <class T>
bool finite(const T* __restrict x, std::size_t n) {
  Bits<T> bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad |= (bits_of(x[i]) & exponent_mask<T>()) == exponent_mask<T>();
  return bad == 0;
}

// The entry points' bodies, compiled once per instruction set below.
inline void sgd_body(void* param, const void* grad, void* momentum, std::size_t n, DType t,
                     const SgdArgs& args) {
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    sgd(static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum), n, args);
  });
}

inline void adamw_body(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                       void* max_exp_avg_sq, std::size_t n, DType t, const AdamWArgs& args) {
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    adamw(static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg),
          static_cast<T*>(exp_avg_sq), static_cast<T*>(max_exp_avg_sq), n, args);
  });
}

inline double largest_body(const void* x, std::size_t n, DType t) {
  double r = 0.0;
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    r = max_abs(static_cast<const T*>(x), n);
  });
  return r;
}

inline __int128 fixed_norm_body(const void* x, std::size_t n, DType t, double p, fixed::Scale sc) {
  __int128 r = 0;
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    r = fixed_norm_sum(static_cast<const T*>(x), n, p, sc);
  });
  return r;
}

inline void scale_body(void* x, std::size_t n, DType t, double factor) {
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    scale_by(static_cast<T*>(x), n, factor);
  });
}

inline bool finite_body(const void* x, std::size_t n, DType t) {
  bool ok = true;
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    ok = finite(static_cast<const T*>(x), n);
  });
  return ok;
}

#define FSDP_OPTIMIZER_KERNEL_SET(ATTRIBUTES, NAME)                                             \
  ATTRIBUTES void NAME##_sgd_step(void* param, const void* grad, void* momentum, std::size_t n, \
                                  DType t, const SgdArgs& args) {                               \
    sgd_body(param, grad, momentum, n, t, args);                                                \
  }                                                                                             \
  ATTRIBUTES void NAME##_adamw_step(void* param, const void* grad, void* exp_avg,               \
                                    void* exp_avg_sq, void* max_exp_avg_sq, std::size_t n,      \
                                    DType t, const AdamWArgs& args) {                           \
    adamw_body(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, t, args);                   \
  }                                                                                             \
  ATTRIBUTES double NAME##_largest_abs(const void* x, std::size_t n, DType t) {                 \
    return largest_body(x, n, t);                                                               \
  }                                                                                             \
  ATTRIBUTES __int128 NAME##_norm_fixed_sum(const void* x, std::size_t n, DType t, double p,    \
                                            fixed::Scale sc) {                                  \
    return fixed_norm_body(x, n, t, p, sc);                                                     \
  }                                                                                             \
  ATTRIBUTES void NAME##_scale(void* x, std::size_t n, DType t, double factor) {                \
    scale_body(x, n, t, factor);                                                                \
  }                                                                                             \
  ATTRIBUTES bool NAME##_all_finite(const void* x, std::size_t n, DType t) {                    \
    return finite_body(x, n, t);                                                                \
  }                                                                                             \
  const OptimizerKernelSet NAME##_set = {#NAME,                                                 \
                                         NAME##_sgd_step,                                       \
                                         NAME##_adamw_step,                                     \
                                         NAME##_largest_abs,                                    \
                                         NAME##_norm_fixed_sum,                                 \
                                         NAME##_scale,                                          \
                                         NAME##_all_finite};

FSDP_OPTIMIZER_KERNEL_SET(FSDP_BASELINE_KERNEL, baseline)
#if FSDP_HOST_KERNELS_AVX2
FSDP_OPTIMIZER_KERNEL_SET(FSDP_AVX2_KERNEL, avx2)
#endif
#undef FSDP_OPTIMIZER_KERNEL_SET

}  // namespace

const OptimizerKernelSet& baseline_optimizer_kernels() {
  return baseline_set;
}

const OptimizerKernelSet* avx2_optimizer_kernels() {
#if FSDP_HOST_KERNELS_AVX2
  return avx2_usable() ? &avx2_set : nullptr;
#else
  return nullptr;
#endif
}

const OptimizerKernelSet& active_optimizer_kernels() {
  static const OptimizerKernelSet& set =
      avx2_optimizer_kernels() ? *avx2_optimizer_kernels() : baseline_set;
  return set;
}

void sgd_step(void* param, const void* grad, void* momentum, std::size_t n, DType t,
              const SgdArgs& args) {
  active_optimizer_kernels().sgd_step(param, grad, momentum, n, t, args);
}

void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                void* max_exp_avg_sq, std::size_t n, DType t, const AdamWArgs& args) {
  active_optimizer_kernels().adamw_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, t,
                                        args);
}

double largest_abs(const void* x, std::size_t n, DType t) {
  return active_optimizer_kernels().largest_abs(x, n, t);
}

__int128 norm_fixed_sum(const void* x, std::size_t n, DType t, double p, fixed::Scale sc) {
  return active_optimizer_kernels().norm_fixed_sum(x, n, t, p, sc);
}

void scale(void* x, std::size_t n, DType t, double factor) {
  active_optimizer_kernels().scale(x, n, t, factor);
}

bool all_finite(const void* x, std::size_t n, DType t) {
  return active_optimizer_kernels().all_finite(x, n, t);
}

}  // namespace fsdp::host
