// The kernels of host memory (and of pinned host memory): the CPU computes at once, on the
// calling thread (memory/host/host_kernels.hpp, optimizer_kernels.hpp).
#pragma once

#include "memory/kernels.hpp"

namespace fsdp {

class HostSpaceKernels final : public Kernels {
 public:
  void scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count, double divisor,
              Store store) override;
  void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t count) override;
  void sgd_step(void* param, const void* grad, void* momentum, std::size_t count, DType t,
                const SgdArgs& args) override;
  void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  void* max_exp_avg_sq, std::size_t count, DType t, const AdamWArgs& args) override;
  void scale(void* x, std::size_t count, DType t, double factor) override;
  double largest_abs(const std::vector<Span>& spans) override;
  __int128 norm_fixed_sum(const std::vector<Span>& spans, double p, fixed::Scale scale) override;
  bool all_finite(const std::vector<Span>& spans) override;
};

}  // namespace fsdp
