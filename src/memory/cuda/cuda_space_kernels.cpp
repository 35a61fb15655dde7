#include "memory/cuda/cuda_space_kernels.hpp"

#include <algorithm>

#include "memory/cuda/cuda_check.hpp"
#include "memory/cuda/cuda_kernels.hpp"
#include "memory/cuda/cuda_memory_space.hpp"

namespace fsdp::cuda {

CudaSpaceKernels::CudaSpaceKernels(CudaMemorySpace& space) : space_(space) {
  const Launch l = space_.launch();
  try {
    check(cudaMalloc(&norm_partials_, sizeof(double) * static_cast<std::size_t>(l.blocks)),
          "cudaMalloc");
    check(cudaMalloc(&flag_, sizeof(unsigned)), "cudaMalloc");
    reserve_results(8);
  } catch (...) {
    release();
    throw;
  }
}

CudaSpaceKernels::~CudaSpaceKernels() {
  release();
}

// The space's stream is idle when it destroys its kernels (CudaMemorySpace::release).
void CudaSpaceKernels::release() noexcept {
  const DeviceGuard device = DeviceGuard::quiet(space_.device());
  cudaFree(norm_partials_);
  cudaFree(results_);
  cudaFree(flag_);
  cudaFreeHost(readback_);
  norm_partials_ = results_ = nullptr;
  flag_ = nullptr;
  readback_ = nullptr;
  result_capacity_ = 0;
}

void CudaSpaceKernels::scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count,
                              double divisor, Store store) {
  cuda::scaled(space_.launch(), out, out_t, x, x_t, count, divisor, store);
}

void CudaSpaceKernels::convert(void* dst, DType dst_t, const void* src, DType src_t,
                               std::size_t count) {
  if (dst_t == src_t)
    space_.copy(dst, src, count * dtype_size(dst_t));
  else
    cuda::convert(space_.launch(), dst, dst_t, src, src_t, count);
}

void CudaSpaceKernels::sgd_step(void* param, const void* grad, void* momentum, std::size_t count,
                                DType t, const SgdArgs& args) {
  cuda::sgd_step(space_.launch(), param, grad, momentum, count, t, args);
}

void CudaSpaceKernels::adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                                  void* max_exp_avg_sq, std::size_t count, DType t,
                                  const AdamWArgs& args) {
  cuda::adamw_step(space_.launch(), param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, count, t,
                   args);
}

void CudaSpaceKernels::scale(void* x, std::size_t count, DType t, double factor) {
  cuda::scale(space_.launch(), x, count, t, factor);
}

void CudaSpaceKernels::reserve_results(std::size_t n) {
  if (n <= result_capacity_) return;
  if (result_capacity_) space_.synchronize();  // no queued kernel or copy still uses the buffers
  const std::size_t capacity = std::max<std::size_t>(n, 2 * result_capacity_);
  DeviceGuard guard(space_.device());
  cudaFree(results_);
  cudaFreeHost(readback_);
  results_ = nullptr;
  readback_ = nullptr;
  result_capacity_ = 0;
  check(cudaMalloc(&results_, capacity * sizeof(double)), "cudaMalloc");
  check(cudaHostAlloc(&readback_, capacity * sizeof(double), cudaHostAllocDefault),
        "cudaHostAlloc");
  result_capacity_ = capacity;
}

std::vector<double> CudaSpaceKernels::norm_partials(const std::vector<Span>& spans, double p) {
  if (spans.empty()) return {};
  reserve_results(spans.size());
  const Launch l = space_.launch();
  for (std::size_t i = 0; i < spans.size(); ++i)
    cuda::norm_partial(l, spans[i].data, spans[i].count, spans[i].dtype, p, norm_partials_,
                       results_ + i);
  check(cudaMemcpyAsync(readback_, results_, spans.size() * sizeof(double), cudaMemcpyDeviceToHost,
                        l.stream),
        "cudaMemcpyAsync");
  space_.synchronize();  // the one wait
  const double* r = static_cast<const double*>(readback_);
  return std::vector<double>(r, r + spans.size());
}

bool CudaSpaceKernels::all_finite(const std::vector<Span>& spans) {
  if (spans.empty()) return true;
  const Launch l = space_.launch();
  check(cudaMemsetAsync(flag_, 0, sizeof(unsigned), l.stream), "cudaMemsetAsync");
  for (const Span& s : spans) cuda::find_nonfinite(l, s.data, s.count, s.dtype, flag_);
  check(cudaMemcpyAsync(readback_, flag_, sizeof(unsigned), cudaMemcpyDeviceToHost, l.stream),
        "cudaMemcpyAsync");
  space_.synchronize();  // the one wait
  return *static_cast<const unsigned*>(readback_) == 0;
}

}  // namespace fsdp::cuda
