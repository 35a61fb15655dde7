// Mixed precision of one unit (paper, "Mixed precision"): the shard is kept in the storage dtype
// (float32: the master copy the optimizer updates), unsharded parameters and the caller's full
// gradients are in param_dtype, and gradients are communicated in reduce_dtype.
#pragma once

#include <optional>
#include <string>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace fsdp {

struct Precision {
  DType storage = DType::Float32;
  DType param = DType::Float32;
  DType reduce = DType::Float32;
};

// Requested dtypes; unset ones default: param to storage, reduce to param.
struct PrecisionRequest {
  std::optional<DType> param, reduce;
};

// The unit's request over the context's; throws InvalidArgument naming `who` for a combination
// this library does not compute: low precision needs a float32 master, and float64 units compute
// and communicate in float64.
inline Precision resolve_precision(DType storage, const PrecisionRequest& context,
                                   const PrecisionRequest& unit, const std::string& who) {
  Precision p;
  p.storage = storage;
  p.param = unit.param ? *unit.param : context.param ? *context.param : storage;
  p.reduce = unit.reduce ? *unit.reduce : context.reduce ? *context.reduce : p.param;
  const auto allowed = [&](DType t) {
    return storage == DType::Float64 ? t == DType::Float64 : t != DType::Float64;
  };
  if (!allowed(p.param) || !allowed(p.reduce))
    fail(Errc::InvalidArgument,
         who + ": param_dtype " + dtype_name(p.param) + " and reduce_dtype " +
             dtype_name(p.reduce) + " do not fit parameters of dtype " + dtype_name(storage) +
             ": float32 parameters compute and reduce in float32, bfloat16 or float16; float64 "
             "parameters only in float64");
  return p;
}

}  // namespace fsdp
