// Element-wise kernels on device arrays, launched on a stream. Each element is computed by the
// same function as on the host (memory/numeric.hpp, compiled without contraction into fused
// multiply-adds; the ones it names are fused on both), so conversions, reduction epilogues and
// optimizer updates give the host's bits.
//
// Reductions (a norm's largest element and its fixed-point sum) are exact in any order: their
// results are the host's bits (but for p other than 1 and 2, whose |x|^p is the device's pow).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "base/dtype.hpp"
#include "base/store.hpp"
#include "memory/cuda/device_guard.hpp"
#include "memory/fixed_sum.hpp"
#include "memory/update_args.hpp"

namespace fsdp::cuda {

struct Launch {
  cudaStream_t stream = nullptr;
  int blocks = 1;      // grid size for grid-stride loops and reductions
  DeviceGuard device;  // the stream's device is current while the Launch lives
};

void convert(const Launch& l, void* dst, DType dst_t, const void* src, DType src_t, std::size_t n);
void scaled(const Launch& l, void* out, DType out_t, const void* x, DType x_t, std::size_t n,
            double divisor, Store store);
void sgd_step(const Launch& l, void* param, const void* grad, void* momentum, std::size_t n,
              DType t, const SgdArgs& args);
// max_exp_avg_sq may be nullptr when !args.amsgrad.
void adamw_step(const Launch& l, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                void* max_exp_avg_sq, std::size_t n, DType t, const AdamWArgs& args);
void scale(const Launch& l, void* x, std::size_t n, DType t, double factor);
// *result (device) = max |x| (NaN propagates). `block_maxima`: l.blocks doubles of device scratch.
void largest_abs(const Launch& l, const void* x, std::size_t n, DType t, double* block_maxima,
                 double* result);
// Adds x's terms |x|^p, scaled and rounded to integers (memory/fixed_sum.hpp), into sums (device,
// 2 * l.blocks, zeroed by the caller): block b's highs at 2b and lows at 2b + 1, in two's
// complement. Integer additions: the same sums in any order.
void norm_fixed_sum(const Launch& l, const void* x, std::size_t n, DType t, double p,
                    fixed::Scale scale, unsigned long long* sums);
// *flag (device) becomes 1 if any element is infinite or NaN (it is not cleared here).
void find_nonfinite(const Launch& l, const void* x, std::size_t n, DType t, unsigned* flag);

}  // namespace fsdp::cuda
