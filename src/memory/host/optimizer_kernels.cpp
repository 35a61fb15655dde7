#include "memory/host/optimizer_kernels.hpp"

#include <cmath>

#include "base/error.hpp"
#include "memory/dtype_dispatch.hpp"
#include "memory/numeric.hpp"

namespace fsdp::host {
namespace {

// The element updates are memory/numeric.hpp's, shared with the CUDA kernels.
template <class T>
void sgd(T* __restrict p, const T* __restrict g, T* __restrict buf, std::size_t n,
         const SgdArgs& a) {
  const numeric::SgdCoefficients<T> c = numeric::sgd_coefficients<T>(a);
  T unused = T(0);
  for (std::size_t i = 0; i < n; ++i) numeric::sgd_update(p[i], g[i], buf ? &buf[i] : &unused, c);
}

template <class T>
void adamw(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, std::size_t n,
           const AdamWArgs& a) {
  const numeric::AdamWCoefficients<T> c = numeric::adamw_coefficients<T>(a);
  for (std::size_t i = 0; i < n; ++i) numeric::adamw_update(p[i], g[i], m[i], v[i], c);
}

template <class T>
double partial_norm(const T* x, std::size_t n, double p) {
  double acc = 0.0;
  if (std::isinf(p)) {
    for (std::size_t i = 0; i < n; ++i) {
      const double a = std::fabs(static_cast<double>(x[i]));
      if (!(a <= acc)) acc = a;  // keeps NaN
    }
  } else if (p == 2.0) {
    for (std::size_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) acc += std::pow(std::fabs(static_cast<double>(x[i])), p);
  }
  return acc;
}

}  // namespace

void sgd_step(void* param, const void* grad, void* momentum, std::size_t n, DType t,
              const SgdArgs& args) {
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    sgd(static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum), n, args);
  });
}

void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, std::size_t n,
                DType t, const AdamWArgs& args) {
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    adamw(static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg),
          static_cast<T*>(exp_avg_sq), n, args);
  });
}

double norm_partial(const void* x, std::size_t n, DType t, double p) {
  double r = 0.0;
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    r = partial_norm(static_cast<const T*>(x), n, p);
  });
  return r;
}

void scale(void* x, std::size_t n, DType t, double factor) {
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* a = static_cast<T*>(x);
    const T f = static_cast<T>(factor);
    for (std::size_t i = 0; i < n; ++i) a[i] = a[i] * f;
  });
}

bool all_finite(const void* x, std::size_t n, DType t) {
  bool ok = true;
  with_storage_type(t, "host optimizer kernel", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* a = static_cast<const T*>(x);
    for (std::size_t i = 0; i < n; ++i) ok &= std::isfinite(a[i]);
  });
  return ok;
}

}  // namespace fsdp::host
