// Device memory of one GPU. Every operation, its kernels' included (cuda_space_kernels.hpp), is
// queued on the space's own stream (non-blocking with respect to the legacy default stream) and
// the CPU does not wait, except for what returns a value (norms, finiteness checks) and
// synchronize(). The caller's stream is joined with events:
// take_from_caller() makes this stream wait for the caller's, marks and handover_to_caller() the
// reverse.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "memory/cuda/cuda_kernels.hpp"
#include "memory/cuda/cuda_space_kernels.hpp"
#include "memory/memory_space.hpp"

namespace fsdp::cuda {

class CudaMemorySpace final : public MemorySpace {
 public:
  explicit CudaMemorySpace(int device);
  ~CudaMemorySpace() override;
  CudaMemorySpace(const CudaMemorySpace&) = delete;
  CudaMemorySpace& operator=(const CudaMemorySpace&) = delete;

  const char* name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  Residence residence() const override { return {Residence::Kind::Cuda, device_}; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // The caller's stream must belong to this space's device (an event recorded on a stream of
  // another device fails later, far from the cause): refused with Errc::InvalidArgument naming
  // both devices. The legacy and per-thread default streams follow the current device: taken.
  void set_caller_stream(cudaStream_t s);
  // Called over and over while synchronize() (and the norms and finiteness checks, which read
  // back) wait for the stream: it may throw to end the wait. The NCCL transport sets one that
  // aborts its communicators on an asynchronous NCCL error or after fsdp_abort, so a wait on a
  // collective whose peer died ends instead of hanging. Set before the space is used by two
  // threads.
  void set_wait_check(std::function<void()> check) { wait_check_ = std::move(check); }

  void deallocate(void* p, std::size_t bytes) override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  Kernels& kernels() override { return *kernels_; }

  void synchronize() override;
  void take_from_caller() override;
  void handover_to_caller() override;
  std::unique_ptr<StreamMark> new_mark() override;
  void record(StreamMark* mark) override;
  void caller_waits(StreamMark* mark) override;

  // The stream, with the device current on the calling thread while the Launch lives (the
  // caller's current device comes back after it). For this space's kernels.
  Launch launch();

 protected:
  void* allocate_bytes(std::size_t bytes) override;

 private:
  void release() noexcept;

  const int device_;
  int blocks_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaStream_t caller_ = nullptr;  // legacy default stream until fsdp_set_stream
  std::function<void()> wait_check_;
  cudaEvent_t caller_done_ = nullptr, library_done_ = nullptr;
  std::unique_ptr<CudaSpaceKernels> kernels_;
};

}  // namespace fsdp::cuda
