// Where the bytes of shards and buffers live. Host memory now; CUDA device memory slots in here
// without the core changing.
#pragma once

#include <cstddef>

#include "core/dtype.hpp"
#include "core/store.hpp"
#include "optim/update_args.hpp"

namespace fsdp {

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual const char* name() const = 0;
  // Throws Errc::OutOfMemory. The memory is not initialized.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) = 0;
  virtual void zero(void* p, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // out[i] (+)= x[i] / divisor (divisor 1: no division), count elements, each array its dtype.
  virtual void scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count,
                      double divisor, Store store) = 0;
  // dst[i] = src[i], rounded to nearest even when narrowing.
  virtual void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t count) = 0;

  // Optimizer arithmetic on shards (float32 or float64), see memory/host/optimizer_kernels.hpp.
  virtual void sgd_step(void* param, const void* grad, void* momentum, std::size_t count, DType t,
                        const SgdArgs& args) = 0;
  virtual void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                          std::size_t count, DType t, const AdamWArgs& args) = 0;
  virtual double norm_partial(const void* x, std::size_t count, DType t, double p) = 0;
  virtual void scale(void* x, std::size_t count, DType t, double factor) = 0;
  virtual bool all_finite(const void* x, std::size_t count, DType t) = 0;
};

}  // namespace fsdp
