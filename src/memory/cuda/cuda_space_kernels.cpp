#include "memory/cuda/cuda_space_kernels.hpp"

#include <algorithm>

#include "memory/cuda/cuda_check.hpp"
#include "memory/cuda/cuda_kernels.hpp"
#include "memory/cuda/cuda_memory_space.hpp"
#include "memory/numeric.hpp"

namespace fsdp::cuda {

CudaSpaceKernels::CudaSpaceKernels(CudaMemorySpace& space) : space_(space) {
  const Launch l = space_.launch();
  try {
    check(cudaMalloc(&block_maxima_, sizeof(double) * static_cast<std::size_t>(l.blocks)),
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
  cudaFree(block_maxima_);
  cudaFree(results_);
  cudaFree(flag_);
  cudaFreeHost(readback_);
  block_maxima_ = results_ = nullptr;
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

double CudaSpaceKernels::largest_abs(const std::vector<Span>& spans) {
  if (spans.empty()) return 0.0;
  reserve_results(spans.size());
  const Launch l = space_.launch();
  for (std::size_t i = 0; i < spans.size(); ++i)
    cuda::largest_abs(l, spans[i].data, spans[i].count, spans[i].dtype, block_maxima_,
                      results_ + i);
  check(cudaMemcpyAsync(readback_, results_, spans.size() * sizeof(double), cudaMemcpyDeviceToHost,
                        l.stream),
        "cudaMemcpyAsync");
  space_.synchronize();  // the one wait
  const double* r = static_cast<const double*>(readback_);
  double largest = 0.0;
  for (std::size_t i = 0; i < spans.size(); ++i) largest = numeric::maximum(largest, r[i]);
  return largest;
}

__int128 CudaSpaceKernels::norm_fixed_sum(const std::vector<Span>& spans, double p,
                                          fixed::Scale scale) {
  if (spans.empty()) return 0;
  const Launch l = space_.launch();
  const std::size_t slots = 2 * static_cast<std::size_t>(l.blocks);  // each block's two sums
  reserve_results(slots);
  auto* sums = reinterpret_cast<unsigned long long*>(results_);
  check(cudaMemsetAsync(sums, 0, slots * sizeof *sums, l.stream), "cudaMemsetAsync");
  for (const Span& s : spans) cuda::norm_fixed_sum(l, s.data, s.count, s.dtype, p, scale, sums);
  check(cudaMemcpyAsync(readback_, sums, slots * sizeof *sums, cudaMemcpyDeviceToHost, l.stream),
        "cudaMemcpyAsync");
  space_.synchronize();  // the one wait
  // Two's complement sums of whole numbers: each block's fits in 64 bits (memory/fixed_sum.hpp).
  const auto* r = static_cast<const unsigned long long*>(readback_);
  __int128 total = 0;
  for (std::size_t b = 0; b < slots; b += 2)
    total += static_cast<__int128>(static_cast<long long>(r[b])) * (__int128{1} << fixed::kHalf) +
             static_cast<long long>(r[b + 1]);
  return total;
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
