#include "memory/host/host_space_kernels.hpp"

#include "memory/host/host_kernels.hpp"
#include "memory/host/optimizer_kernels.hpp"
#include "memory/numeric.hpp"

namespace fsdp {

void HostSpaceKernels::scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count,
                              double divisor, Store store) {
  host::scaled(out, out_t, x, x_t, count, divisor, store);
}

void HostSpaceKernels::convert(void* dst, DType dst_t, const void* src, DType src_t,
                               std::size_t count) {
  host::convert(dst, dst_t, src, src_t, count);
}

void HostSpaceKernels::sgd_step(void* param, const void* grad, void* momentum, std::size_t count,
                                DType t, const SgdArgs& args) {
  host::sgd_step(param, grad, momentum, count, t, args);
}

void HostSpaceKernels::adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                                  void* max_exp_avg_sq, std::size_t count, DType t,
                                  const AdamWArgs& args) {
  host::adamw_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, count, t, args);
}

void HostSpaceKernels::scale(void* x, std::size_t count, DType t, double factor) {
  host::scale(x, count, t, factor);
}

double HostSpaceKernels::largest_abs(const std::vector<Span>& spans) {
  double largest = 0.0;
  for (const Span& s : spans)
    largest = numeric::maximum(largest, host::largest_abs(s.data, s.count, s.dtype));
  return largest;
}

__int128 HostSpaceKernels::norm_fixed_sum(const std::vector<Span>& spans, double p,
                                          fixed::Scale scale) {
  __int128 total = 0;
  for (const Span& s : spans) total += host::norm_fixed_sum(s.data, s.count, s.dtype, p, scale);
  return total;
}

bool HostSpaceKernels::all_finite(const std::vector<Span>& spans) {
  for (const Span& s : spans)
    if (!host::all_finite(s.data, s.count, s.dtype)) return false;
  return true;
}

}  // namespace fsdp
