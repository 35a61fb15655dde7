// Makes a device current on the calling thread for the guard's life, then makes the thread's
// previous device current again: the library never leaves the application's thread on another
// GPU than the one it chose (cudaSetDevice is per thread and sticky).
#pragma once

#include <cuda_runtime.h>

#include "memory/cuda/cuda_check.hpp"

namespace fsdp::cuda {

class DeviceGuard {
 public:
  DeviceGuard() = default;  // guards nothing
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) {
      check(cudaSetDevice(device), "cudaSetDevice");
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(DeviceGuard&& o) noexcept : previous_(o.previous_), switched_(o.switched_) {
    o.switched_ = false;
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  DeviceGuard& operator=(DeviceGuard&&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace fsdp::cuda
