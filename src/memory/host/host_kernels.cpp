#include "memory/host/host_kernels.hpp"

#include "core/error.hpp"

namespace fsdp::host {
namespace {

// Division, not multiplication by 1/W: the mean is the correctly rounded sum / W for every W.
// One loop per (store, divisor == 1) case so each vectorizes without a branch inside.
template <class T>
void pair_scaled(T* __restrict out, const T* __restrict a, const T* __restrict b, std::size_t n,
                 T divisor, Store store) {
  const bool divide = divisor != T(1);
  if (store == Store::Accumulate && divide) {
    for (std::size_t i = 0; i < n; ++i) out[i] += (a[i] + b[i]) / divisor;
  } else if (store == Store::Accumulate) {
    for (std::size_t i = 0; i < n; ++i) out[i] += a[i] + b[i];
  } else if (divide) {
    for (std::size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) / divisor;
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }
}

template <class T>
void single_scaled(T* __restrict out, const T* __restrict x, std::size_t n, T divisor,
                   Store store) {
  const bool divide = divisor != T(1);
  if (store == Store::Accumulate && divide) {
    for (std::size_t i = 0; i < n; ++i) out[i] += x[i] / divisor;
  } else if (store == Store::Accumulate) {
    for (std::size_t i = 0; i < n; ++i) out[i] += x[i];
  } else if (divide) {
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] / divisor;
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i];
  }
}

template <class T>
void add(T* __restrict a, const T* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] += b[i];
}

[[noreturn]] void unsupported(DType t) {
  fail(Errc::Unsupported, std::string("host arithmetic on ") + dtype_name(t));
}

}  // namespace

void add_into(void* a, const void* b, std::size_t n, DType t) {
  switch (t) {
    case DType::Float32: return add(static_cast<float*>(a), static_cast<const float*>(b), n);
    case DType::Float64: return add(static_cast<double*>(a), static_cast<const double*>(b), n);
    default: unsupported(t);
  }
}

void add_pair_scaled(void* out, const void* a, const void* b, std::size_t n, DType t,
                     double divisor, Store store) {
  switch (t) {
    case DType::Float32:
      return pair_scaled(static_cast<float*>(out), static_cast<const float*>(a),
                         static_cast<const float*>(b), n, static_cast<float>(divisor), store);
    case DType::Float64:
      return pair_scaled(static_cast<double*>(out), static_cast<const double*>(a),
                         static_cast<const double*>(b), n, divisor, store);
    default: unsupported(t);
  }
}

void scaled(void* out, const void* x, std::size_t n, DType t, double divisor, Store store) {
  switch (t) {
    case DType::Float32:
      return single_scaled(static_cast<float*>(out), static_cast<const float*>(x), n,
                           static_cast<float>(divisor), store);
    case DType::Float64:
      return single_scaled(static_cast<double*>(out), static_cast<const double*>(x), n, divisor,
                           store);
    default: unsupported(t);
  }
}

}  // namespace fsdp::host
