// Elementwise arithmetic on host arrays, dispatched on dtype. Loops are written so the compiler
// vectorizes them; each keeps a fixed per-element order, so results are deterministic.
//
// bfloat16 and float16 operands are widened to float, computed on, and rounded back to nearest
// even once per result; float64 computes in double.
#pragma once

#include <cstddef>

#include "base/dtype.hpp"
#include "base/store.hpp"

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

// The functions above exist once per instruction set: the baseline of the target, and on x86-64
// AVX2, picked at first use when the CPU has it. Wider vectors change no result: every element
// goes through the same IEEE operations in the same order (and nothing is contracted into a fused
// multiply-add, see src/CMakeLists.txt), which tests/internal/test_host_kernels.cpp checks bit
// for bit. The one freedom left is which NaN an operation on two NaNs returns (IEEE leaves it
// open, and the compiler may swap an addition's operands): a NaN stays a NaN, its sign and
// payload may differ between the two builds. On 512 KiB operands the summing loop of the
// shared-memory reduce-scatter runs about 1.2x faster with AVX2 on the development machine.
struct KernelSet {
  const char* name;
  void (*add_into)(void*, const void*, std::size_t, DType);
  void (*add_pair_scaled)(void*, DType, const void*, const void*, DType, std::size_t, double,
                          Store);
  void (*scaled)(void*, DType, const void*, DType, std::size_t, double, Store);
  void (*convert)(void*, DType, const void*, DType, std::size_t);
};
const KernelSet& baseline_kernels();
const KernelSet* avx2_kernels();    // nullptr when not built in, or the CPU lacks AVX2
const KernelSet& active_kernels();  // the one the functions above use

}  // namespace fsdp::host
