#include "memory/host/optimizer_kernels.hpp"

#include <cmath>

#include "core/error.hpp"

namespace fsdp::host {
namespace {

// PyTorch: grad += wd * p; buf = momentum * buf + (1 - dampening) * grad (buf = grad at the first
// step); grad = nesterov ? grad + momentum * buf : buf; p += -lr * grad.
template <class T>
void sgd(T* __restrict p, const T* __restrict g, T* __restrict buf, std::size_t n,
         const SgdArgs& a) {
  const T lr = static_cast<T>(a.lr), wd = static_cast<T>(a.weight_decay);
  const T mu = static_cast<T>(a.momentum), keep = static_cast<T>(1.0 - a.dampening);
  for (std::size_t i = 0; i < n; ++i) {
    T d = g[i];
    if (a.weight_decay != 0.0) d = d + wd * p[i];
    if (a.momentum != 0.0) {
      buf[i] = a.first_step ? d : mu * buf[i] + keep * d;
      d = a.nesterov ? d + mu * buf[i] : buf[i];
    }
    p[i] = p[i] + (-lr) * d;
  }
}

// PyTorch (decoupled weight decay): p *= 1 - lr * wd; m = m + (1 - beta1) * (g - m) (lerp);
// v = v * beta2 + (1 - beta2) * g * g; denom = sqrt(v) / sqrt(1 - beta2^t) + eps;
// p += -(lr / (1 - beta1^t)) * (m / denom).
template <class T>
void adamw(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, std::size_t n,
           const AdamWArgs& a) {
  const T decay = static_cast<T>(1.0 - a.lr * a.weight_decay);
  const T b1c = static_cast<T>(1.0 - a.beta1), b2 = static_cast<T>(a.beta2);
  const T b2c = static_cast<T>(1.0 - a.beta2), eps = static_cast<T>(a.eps);
  const T step = static_cast<T>(-(a.lr / a.bias_correction1));
  const T bc2 = static_cast<T>(a.bias_correction2_sqrt);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = p[i] * decay;
    m[i] = m[i] + b1c * (g[i] - m[i]);
    v[i] = v[i] * b2 + b2c * (g[i] * g[i]);
    const T denom = std::sqrt(v[i]) / bc2 + eps;
    p[i] = p[i] + step * (m[i] / denom);
  }
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

template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(static_cast<float*>(nullptr));
    case DType::Float64: return f(static_cast<double*>(nullptr));
    default: fail(Errc::Internal, std::string("optimizer kernel on ") + dtype_name(t));
  }
}

}  // namespace

void sgd_step(void* param, const void* grad, void* momentum, std::size_t n, DType t,
              const SgdArgs& args) {
  dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    sgd(static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(momentum), n, args);
  });
}

void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, std::size_t n,
                DType t, const AdamWArgs& args) {
  dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    adamw(static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg),
          static_cast<T*>(exp_avg_sq), n, args);
  });
}

double norm_partial(const void* x, std::size_t n, DType t, double p) {
  double r = 0.0;
  dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    r = partial_norm(static_cast<const T*>(x), n, p);
  });
  return r;
}

void scale(void* x, std::size_t n, DType t, double factor) {
  dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* a = static_cast<T*>(x);
    const T f = static_cast<T>(factor);
    for (std::size_t i = 0; i < n; ++i) a[i] = a[i] * f;
  });
}

bool all_finite(const void* x, std::size_t n, DType t) {
  bool ok = true;
  dispatch(t, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* a = static_cast<const T*>(x);
    for (std::size_t i = 0; i < n; ++i) ok &= std::isfinite(a[i]);
  });
  return ok;
}

}  // namespace fsdp::host
