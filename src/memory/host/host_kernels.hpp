// Elementwise arithmetic on host arrays, dispatched on dtype. Loops are written so the compiler
// vectorizes them; each keeps a fixed per-element order, so results are deterministic.
#pragma once

#include <cstddef>

#include "core/dtype.hpp"
#include "core/store.hpp"

namespace fsdp::host {

// a[i] += b[i]
void add_into(void* a, const void* b, std::size_t n, DType t);

// out[i] (+)= (a[i] + b[i]) / divisor  (divisor 1: no division)
void add_pair_scaled(void* out, const void* a, const void* b, std::size_t n, DType t,
                     double divisor, Store store);

// out[i] (+)= x[i] / divisor  (divisor 1: no division)
void scaled(void* out, const void* x, std::size_t n, DType t, double divisor, Store store);

}  // namespace fsdp::host
