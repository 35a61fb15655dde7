// Element-wise kernels on device arrays, launched on a stream. Each element is computed by the
// same function as on the host (memory/numeric.hpp, compiled without contraction into fused
// multiply-adds; the ones it names are fused on both), so conversions, reduction epilogues and
// optimizer updates give the host's bits.
//
// Reductions (norms) run in a fixed shape: `blocks` blocks of 256 threads, each thread summing a
// fixed strided set of elements in order, then fixed trees; the result is the same run after run
// on one device model (it differs from the host's sequential sum in the last bits).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "base/dtype.hpp"
#include "base/store.hpp"
#include "memory/cuda/device_guard.hpp"
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
// *result (device) = sum |x|^p, or max |x| for infinite p (NaN propagates). `block_partials`:
// l.blocks doubles of device scratch.
void norm_partial(const Launch& l, const void* x, std::size_t n, DType t, double p,
                  double* block_partials, double* result);
// *flag (device) becomes 1 if any element is infinite or NaN (it is not cleared here).
void find_nonfinite(const Launch& l, const void* x, std::size_t n, DType t, unsigned* flag);

}  // namespace fsdp::cuda
