// Element-wise optimizer updates, gradient norms and scaling on host arrays of float32 or float64
// (the master shard's dtype, which optimizer state and gradient shards share). Each update is the
// one PyTorch's single-tensor implementation computes, in the same operation order, so a
// non-sharded reference written the same way agrees bit for bit.
#pragma once

#include <cstddef>

#include "base/dtype.hpp"
#include "memory/update_args.hpp"

namespace fsdp {

namespace host {

// momentum may be nullptr when args.momentum == 0.
void sgd_step(void* param, const void* grad, void* momentum, std::size_t n, DType t,
              const SgdArgs& args);
void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, std::size_t n,
                DType t, const AdamWArgs& args);
// sum |x|^p in double, or max |x| when p is infinite. NaN propagates.
double norm_partial(const void* x, std::size_t n, DType t, double p);
void scale(void* x, std::size_t n, DType t, double factor);
bool all_finite(const void* x, std::size_t n, DType t);

}  // namespace host
}  // namespace fsdp
