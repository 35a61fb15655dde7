// Elementwise arithmetic on host arrays, dispatched on dtype. Loops are written so the compiler
// vectorizes them; each keeps a fixed per-element order, so results are deterministic.
//
// bfloat16 and float16 operands are widened to float, computed on, and rounded back to nearest
// even once per result; float64 computes in double.
#pragma once

#include <cstddef>

#include "core/dtype.hpp"
#include "core/store.hpp"

namespace fsdp::host {

// a[i] += b[i], both of dtype t
void add_into(void* a, const void* b, std::size_t n, DType t);

// out[i] (+)= (a[i] + b[i]) / divisor  (divisor 1: no division); a and b of in_t, out of out_t
void add_pair_scaled(void* out, DType out_t, const void* a, const void* b, DType in_t,
                     std::size_t n, double divisor, Store store);

// out[i] (+)= x[i] / divisor  (divisor 1: no division); x of in_t, out of out_t
void scaled(void* out, DType out_t, const void* x, DType in_t, std::size_t n, double divisor,
            Store store);

// dst[i] = src[i] converted (rounded to nearest even when narrowing)
void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t n);

}  // namespace fsdp::host
