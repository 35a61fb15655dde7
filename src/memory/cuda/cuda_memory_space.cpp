#include "memory/cuda/cuda_memory_space.hpp"

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
    kernels_ = std::make_unique<CudaSpaceKernels>(*this);
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
  kernels_.reset();
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
