// Makes a device current on the calling thread for the guard's life, then leaves the thread as it
// found it: its previous device current again, or, on a thread that had no CUDA context (the
// progress thread, the application's thread before it chose a device), no context at all. Setting
// device 0 back there would create a primary context on GPU 0 in every rank (CUDA >= 12 makes
// cudaSetDevice create it: about 0.5 GB each, and an error on an EXCLUSIVE_PROCESS GPU 0).
#pragma once

#include <cuda_runtime.h>

#include "memory/cuda/cuda_check.hpp"

namespace fsdp::cuda {

// The thread's current CUDA context (nullptr: none), through the driver's cuCtxGetCurrent and
// cuCtxSetCurrent found at run time (the library links the runtime only). Where the driver
// entry points are missing, "unknown" is reported as a context (the old behaviour).
bool thread_has_context() noexcept;
void clear_thread_context() noexcept;

class DeviceGuard {
 public:
  DeviceGuard() = default;  // guards nothing
  explicit DeviceGuard(int device) { enter(device, /*strict=*/true); }
  // The same for teardown (noexcept): CUDA errors are ignored; a previous device the runtime
  // cannot tell is not restored.
  static DeviceGuard quiet(int device) noexcept {
    DeviceGuard g;
    g.enter(device, /*strict=*/false);
    return g;
  }
  ~DeviceGuard() {
    if (!switched_) return;
    if (had_context_)
      cudaSetDevice(previous_);
    else
      clear_thread_context();
  }
  DeviceGuard(DeviceGuard&& o) noexcept
      : previous_(o.previous_), switched_(o.switched_), had_context_(o.had_context_) {
    o.switched_ = false;
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;

 private:
  void enter(int device, bool strict) {
    had_context_ = thread_has_context();
    const cudaError_t got = cudaGetDevice(&previous_);
    if (strict) check(got, "cudaGetDevice");
    if (!had_context_ || got != cudaSuccess || previous_ != device) {
      const cudaError_t set = cudaSetDevice(device);
      if (strict) check(set, "cudaSetDevice");
      switched_ = !had_context_ || got == cudaSuccess;
    }
  }

  int previous_ = 0;
  bool switched_ = false;
  bool had_context_ = true;
};

}  // namespace fsdp::cuda
