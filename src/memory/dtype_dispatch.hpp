// From a runtime dtype to the element type kernels are instantiated for: f(T*) is called with a
// null pointer of the type. Shared by the host kernels and the CUDA kernels' launchers.
#pragma once

#include <string>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "memory/numeric.hpp"

namespace fsdp {

// Every dtype: float, double, numeric::BFloat16, numeric::Float16.
template <class F>
void with_element_type(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(static_cast<float*>(nullptr));
    case DType::Float64: return f(static_cast<double*>(nullptr));
    case DType::BFloat16: return f(static_cast<numeric::BFloat16*>(nullptr));
    case DType::Float16: return f(static_cast<numeric::Float16*>(nullptr));
  }
  fail(Errc::Internal, "kernel on an unknown dtype");
}

// The storage dtypes (shards, optimizer state): float and double. `what` names the kernel in
// the internal error another dtype raises.
template <class F>
void with_storage_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::Float32: return f(static_cast<float*>(nullptr));
    case DType::Float64: return f(static_cast<double*>(nullptr));
    default: fail(Errc::Internal, std::string(what) + " on " + dtype_name(t));
  }
}

}  // namespace fsdp
