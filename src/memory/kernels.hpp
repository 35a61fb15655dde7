// The arithmetic the library runs on shards and buffers: conversions, reduction epilogues, the
// optimizer updates, gradient scaling, norms and finiteness checks. Each memory space hands out
// the kernels that work on its memory (MemorySpace::kernels()): they are queued in order with the
// space's own operations (zero, copy) on its stream, so the space's ordering against the caller
// (take_from_caller, handover_to_caller, marks) covers them too.
#pragma once

#include <cstddef>
#include <vector>

#include "base/dtype.hpp"
#include "base/store.hpp"
#include "memory/fixed_sum.hpp"
#include "memory/update_args.hpp"

namespace fsdp {

// `count` elements of dtype `dtype` at `data`, in some memory space.
struct Span {
  const void* data;
  std::size_t count;
  DType dtype;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // out[i] (+)= x[i] / divisor (divisor 1: no division), count elements, each array its dtype.
  virtual void scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count,
                      double divisor, Store store) = 0;
  // dst[i] = src[i], rounded to nearest even when narrowing.
  virtual void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t count) = 0;

  // Optimizer arithmetic on shards (float32 or float64), see memory/numeric.hpp. momentum may be
  // nullptr when args.momentum == 0, max_exp_avg_sq when !args.amsgrad.
  virtual void sgd_step(void* param, const void* grad, void* momentum, std::size_t count, DType t,
                        const SgdArgs& args) = 0;
  virtual void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                          void* max_exp_avg_sq, std::size_t count, DType t,
                          const AdamWArgs& args) = 0;
  virtual void scale(void* x, std::size_t count, DType t, double factor) = 0;

  // These return values to the CPU, so they wait for the space's queued work: once per call,
  // whatever the number of spans (a device computes every span's result, then reads them back
  // together). largest_abs: the largest |x| of every span (0 for none; NaN if any element is NaN).
  // all_finite: whether no element of any span is infinite or NaN.
  virtual double largest_abs(const std::vector<Span>& spans) = 0;
  // norm_fixed_sum: over every span, the sum of |x|^p (p finite), each term multiplied by
  // scale.first and scale.second and rounded to an integer, added exactly (memory/fixed_sum.hpp):
  // the same integer for any split of the elements into spans, ranks, threads or blocks.
  virtual __int128 norm_fixed_sum(const std::vector<Span>& spans, double p, fixed::Scale scale) = 0;
  virtual bool all_finite(const std::vector<Span>& spans) = 0;
};

}  // namespace fsdp
