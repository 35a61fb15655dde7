// The kernels of one GPU's memory (memory/cuda/cuda_kernels.hpp), launched on its memory space's
// stream. Norms and finiteness checks read their results back through buffers allocated once here
// (kernel scratch, not model memory: not counted as allocations).
#pragma once

#include "memory/kernels.hpp"

namespace fsdp::cuda {

class CudaMemorySpace;

class CudaSpaceKernels final : public Kernels {
 public:
  // Allocates the scratch on the space's device. Throws Errc::Cuda.
  explicit CudaSpaceKernels(CudaMemorySpace& space);
  ~CudaSpaceKernels() override;
  CudaSpaceKernels(const CudaSpaceKernels&) = delete;
  CudaSpaceKernels& operator=(const CudaSpaceKernels&) = delete;

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

 private:
  void release() noexcept;
  // Room for n results on the device and n in pinned host memory (grown, never shrunk).
  void reserve_results(std::size_t n);

  CudaMemorySpace& space_;
  double* block_maxima_ = nullptr;   // device, one double per block of a launch
  double* results_ = nullptr;        // device: one norm per span, or norm_fixed_sum's sums
  unsigned* flag_ = nullptr;         // device
  void* readback_ = nullptr;         // pinned host: results read by the CPU
  std::size_t result_capacity_ = 0;  // doubles in results_ and in readback_
};

}  // namespace fsdp::cuda
