// Host memory: 64-byte aligned (a cache line, and every SIMD width in use).
#pragma once

#include "memory/host/optimizer_kernels.hpp"
#include "memory/memory_space.hpp"

namespace fsdp {

class HostMemorySpace : public MemorySpace {
 public:
  const char* name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  void deallocate(void* p, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count, double divisor,
              Store store) override;
  void convert(void* dst, DType dst_t, const void* src, DType src_t, std::size_t count) override;
  void sgd_step(void* param, const void* grad, void* momentum, std::size_t count, DType t,
                const SgdArgs& args) override {
    host::sgd_step(param, grad, momentum, count, t, args);
  }
  void adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  void* max_exp_avg_sq, std::size_t count, DType t,
                  const AdamWArgs& args) override {
    host::adamw_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, count, t, args);
  }
  std::vector<double> norm_partials(const std::vector<Span>& spans, double p) override {
    std::vector<double> out;
    out.reserve(spans.size());
    for (const Span& s : spans) out.push_back(host::norm_partial(s.data, s.count, s.dtype, p));
    return out;
  }
  void scale(void* x, std::size_t count, DType t, double factor) override {
    host::scale(x, count, t, factor);
  }
  bool all_finite(const std::vector<Span>& spans) override {
    for (const Span& s : spans)
      if (!host::all_finite(s.data, s.count, s.dtype)) return false;
    return true;
  }

 protected:
  void* allocate_bytes(std::size_t bytes) override;
};

}  // namespace fsdp
