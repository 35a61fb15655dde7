// Element types of flat parameters.
#pragma once

#include <cstddef>

namespace fsdp {

// Values equal fsdp_dtype_t's (checked in src/capi).
enum class DType : int { Float32 = 0, Float64 = 1, BFloat16 = 2, Float16 = 3 };
constexpr int kDTypeCount = 4;

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::BFloat16:
    case DType::Float16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "unknown";
}

// Parameters are stored in 32 or 64 bits; 16-bit types are for computing and communicating.
inline bool dtype_storable(DType t) {
  return t == DType::Float32 || t == DType::Float64;
}

// The dtype a parameter of dtype `t` is stored in: float64 stays float64, everything narrower
// gets a float32 master (and computes in `t` as its param_dtype).
inline DType storage_dtype(DType t) {
  return t == DType::Float64 ? DType::Float64 : DType::Float32;
}

}  // namespace fsdp
