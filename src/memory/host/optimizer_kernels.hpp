// Element-wise optimizer updates, gradient norms and scaling on host arrays of float32 or float64
// (the master shard's dtype, which optimizer state and gradient shards share). Each update is the
// one PyTorch's single-tensor implementation computes, in the same operation order, so a
// non-sharded reference written the same way agrees bit for bit.
#pragma once

#include <cstddef>

#include "base/dtype.hpp"
#include "memory/fixed_sum.hpp"
#include "memory/update_args.hpp"

namespace fsdp {

namespace host {

// momentum may be nullptr when args.momentum == 0, max_exp_avg_sq when !args.amsgrad.
void sgd_step(void* param, const void* grad, void* momentum, std::size_t n, DType t,
              const SgdArgs& args);
void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                void* max_exp_avg_sq, std::size_t n, DType t, const AdamWArgs& args);
// max |x| (any order: a maximum is exact); NaN when an element is NaN.
double largest_abs(const void* x, std::size_t n, DType t);
// The sum of |x|^p (p finite), each term scaled by sc and rounded to an integer, added exactly
// (memory/fixed_sum.hpp): the same for any split of the elements.
__int128 norm_fixed_sum(const void* x, std::size_t n, DType t, double p, fixed::Scale sc);
void scale(void* x, std::size_t n, DType t, double factor);
bool all_finite(const void* x, std::size_t n, DType t);

// The functions above exist once per instruction set, as host_kernels.hpp's do, with the same
// guarantee: each element goes through the same IEEE operations in the same order in every build
// (sqrt is the correctly rounded instruction, a fused multiply-add only where numeric.hpp names
// one, and then rounded once in every build), so the results are the same bits, but for which NaN
// an operation on two NaNs returns. The loops are vectorized (the
// updates' flags are hoisted out of them), the serial sums of norm_partial excepted.
// tests/internal/test_optimizer_kernels.cpp checks each set against a scalar reference.
struct OptimizerKernelSet {
  const char* name;
  void (*sgd_step)(void*, const void*, void*, std::size_t, DType, const SgdArgs&);
  void (*adamw_step)(void*, const void*, void*, void*, void*, std::size_t, DType, const AdamWArgs&);
  double (*largest_abs)(const void*, std::size_t, DType);
  __int128 (*norm_fixed_sum)(const void*, std::size_t, DType, double, fixed::Scale);
  void (*scale)(void*, std::size_t, DType, double);
  bool (*all_finite)(const void*, std::size_t, DType);
};
const OptimizerKernelSet& baseline_optimizer_kernels();
const OptimizerKernelSet* avx2_optimizer_kernels();    // nullptr: not built in, or no AVX2
const OptimizerKernelSet& active_optimizer_kernels();  // the one the functions above use

}  // namespace host
}  // namespace fsdp
