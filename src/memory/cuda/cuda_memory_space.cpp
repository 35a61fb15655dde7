#include "memory/cuda/cuda_memory_space.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "memory/cuda/cuda_check.hpp"

namespace fsdp::cuda {
namespace {

class EventMark final : public StreamMark {
 public:
  EventMark() {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~EventMark() override { cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
  bool recorded = false;
};

}  // namespace

void CudaMemorySpace::set_caller_stream(cudaStream_t s) {
  if (s != nullptr && s != cudaStreamLegacy && s != cudaStreamPerThread) {
    int on = -1;
    check(cudaStreamGetDevice(s, &on), "cudaStreamGetDevice");
    if (on != device_)
      fail(Errc::InvalidArgument,
           "stream: created on CUDA device " + std::to_string(on) + ", but this context works on " +
               "device " + std::to_string(device_) + " (create the stream after cudaSetDevice(" +
               std::to_string(device_) + "); fsdp_context_placement tells the device)");
  }
  caller_ = s;
}

CudaMemorySpace::CudaMemorySpace(int device) : device_(device) {
  DeviceGuard guard(device_);
  int sms = 1;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
        "cudaDeviceGetAttribute");
  blocks_ = sms * 8;  // enough resident blocks to saturate memory bandwidth
  try {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&caller_done_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&library_done_, cudaEventDisableTiming), "cudaEventCreate");
    // Kernel scratch, allocated once here rather than through allocate(): it is not model memory.
    check(cudaMalloc(&norm_partials_, sizeof(double) * static_cast<std::size_t>(blocks_)),
          "cudaMalloc");
    check(cudaMalloc(&flag_, sizeof(unsigned)), "cudaMalloc");
    reserve_results(8);
  } catch (...) {
    release();
    throw;
  }
}

CudaMemorySpace::~CudaMemorySpace() {
  release();
}

void CudaMemorySpace::release() noexcept {
  const DeviceGuard device = DeviceGuard::quiet(device_);  // the thread left as it was found
  if (stream_) cudaStreamSynchronize(stream_);
  cudaFree(norm_partials_);
  cudaFree(results_);
  cudaFree(flag_);
  cudaFreeHost(readback_);
  norm_partials_ = results_ = nullptr;
  result_capacity_ = 0;
  flag_ = nullptr;
  readback_ = nullptr;
  if (caller_done_) cudaEventDestroy(caller_done_);
  if (library_done_) cudaEventDestroy(library_done_);
  if (stream_) cudaStreamDestroy(stream_);
  caller_done_ = library_done_ = nullptr;
  stream_ = nullptr;
}

Launch CudaMemorySpace::launch() {
  return {stream_, blocks_, DeviceGuard(device_)};
}

void* CudaMemorySpace::allocate_bytes(std::size_t bytes) {
  const Launch l = launch();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail(Errc::OutOfMemory, "cudaMalloc of " + std::to_string(bytes) + " bytes on device " +
                                std::to_string(device_) + " failed (out of device memory)");
  }
  check(e, "cudaMalloc");
  return p;
}

// cudaFree waits for the device: the pool makes it rare (trim, shutdown, a larger unit).
void CudaMemorySpace::deallocate(void* p, std::size_t) {
  const Launch l = launch();
  cudaFree(p);
}

void CudaMemorySpace::zero(void* p, std::size_t bytes) {
  const Launch l = launch();
  check(cudaMemsetAsync(p, 0, bytes, l.stream), "cudaMemsetAsync");
}

void CudaMemorySpace::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const Launch l = launch();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, l.stream), "cudaMemcpyAsync");
}

void CudaMemorySpace::scaled(void* out, DType out_t, const void* x, DType x_t, std::size_t count,
                             double divisor, Store store) {
  cuda::scaled(launch(), out, out_t, x, x_t, count, divisor, store);
}

void CudaMemorySpace::convert(void* dst, DType dst_t, const void* src, DType src_t,
                              std::size_t count) {
  if (dst_t == src_t)
    copy(dst, src, count * dtype_size(dst_t));
  else
    cuda::convert(launch(), dst, dst_t, src, src_t, count);
}

void CudaMemorySpace::sgd_step(void* param, const void* grad, void* momentum, std::size_t count,
                               DType t, const SgdArgs& args) {
  cuda::sgd_step(launch(), param, grad, momentum, count, t, args);
}

void CudaMemorySpace::adamw_step(void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                                 void* max_exp_avg_sq, std::size_t count, DType t,
                                 const AdamWArgs& args) {
  cuda::adamw_step(launch(), param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, count, t, args);
}

void CudaMemorySpace::reserve_results(std::size_t n) {
  if (n <= result_capacity_) return;
  if (result_capacity_) synchronize();  // no queued kernel or copy still uses the old buffers
  const std::size_t capacity = std::max<std::size_t>(n, 2 * result_capacity_);
  DeviceGuard guard(device_);
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

std::vector<double> CudaMemorySpace::norm_partials(const std::vector<Span>& spans, double p) {
  if (spans.empty()) return {};
  reserve_results(spans.size());
  const Launch l = launch();
  for (std::size_t i = 0; i < spans.size(); ++i)
    cuda::norm_partial(l, spans[i].data, spans[i].count, spans[i].dtype, p, norm_partials_,
                       results_ + i);
  check(cudaMemcpyAsync(readback_, results_, spans.size() * sizeof(double), cudaMemcpyDeviceToHost,
                        l.stream),
        "cudaMemcpyAsync");
  synchronize();  // the one wait
  const double* r = static_cast<const double*>(readback_);
  return std::vector<double>(r, r + spans.size());
}

void CudaMemorySpace::scale(void* x, std::size_t count, DType t, double factor) {
  cuda::scale(launch(), x, count, t, factor);
}

bool CudaMemorySpace::all_finite(const std::vector<Span>& spans) {
  if (spans.empty()) return true;
  const Launch l = launch();
  check(cudaMemsetAsync(flag_, 0, sizeof(unsigned), l.stream), "cudaMemsetAsync");
  for (const Span& s : spans) cuda::find_nonfinite(l, s.data, s.count, s.dtype, flag_);
  check(cudaMemcpyAsync(readback_, flag_, sizeof(unsigned), cudaMemcpyDeviceToHost, l.stream),
        "cudaMemcpyAsync");
  synchronize();  // the one wait
  return *static_cast<const unsigned*>(readback_) == 0;
}

// Polled rather than cudaStreamSynchronize: a collective whose peer died never completes, and only
// the wait check (NCCL's asynchronous errors, an abort) can end the wait.
void CudaMemorySpace::synchronize() {
  const Launch l = launch();
  for (int polls = 0;; ++polls) {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e != cudaErrorNotReady) {
      check(e, "cudaStreamQuery (an earlier queued operation)");
      return;
    }
    if (wait_check_) wait_check_();
    if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void CudaMemorySpace::take_from_caller() {
  const Launch l = launch();
  check(cudaEventRecord(caller_done_, caller_), "cudaEventRecord (the caller's stream)");
  check(cudaStreamWaitEvent(stream_, caller_done_, 0), "cudaStreamWaitEvent");
}

void CudaMemorySpace::handover_to_caller() {
  const Launch l = launch();
  check(cudaEventRecord(library_done_, stream_), "cudaEventRecord");
  check(cudaStreamWaitEvent(caller_, library_done_, 0),
        "cudaStreamWaitEvent (the caller's stream)");
}

std::unique_ptr<StreamMark> CudaMemorySpace::new_mark() {
  const Launch l = launch();
  return std::make_unique<EventMark>();
}

void CudaMemorySpace::record(StreamMark* mark) {
  auto* m = static_cast<EventMark*>(mark);
  const Launch l = launch();
  check(cudaEventRecord(m->event, stream_), "cudaEventRecord");
  m->recorded = true;
}

void CudaMemorySpace::caller_waits(StreamMark* mark) {
  auto* m = static_cast<EventMark*>(mark);
  if (!m->recorded) return;
  const Launch l = launch();
  check(cudaStreamWaitEvent(caller_, m->event, 0), "cudaStreamWaitEvent (the caller's stream)");
}

}  // namespace fsdp::cuda
