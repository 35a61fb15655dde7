// Errors raised inside the core. The C boundary (src/capi/guard.hpp) turns them into status codes;
// nothing else in the library catches them.
#pragma once

#include <stdexcept>
#include <string>

namespace fsdp {

// The values equal fsdp_status_t's (checked by static_assert in src/capi/errors.cpp), so the core
// does not depend on the C header.
enum class Errc : int {
  InvalidArgument = 1,
  InvalidHandle = 2,
  DestroyedHandle = 3,
  Finalized = 4,
  OutOfRange = 5,
  State = 6,
  Mismatch = 7,
  Version = 8,
  Unsupported = 9,
  OutOfMemory = 10,
  Mpi = 11,
  Internal = 12,
  Callback = 13,
  Io = 14,
  Format = 15,
  Corrupt = 16,
  Cuda = 17,
  Nccl = 18,
  Aborted = 19,
  Timeout = 20,
  StepBoundary = 21,
};

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Errc code() const { return code_; }

 private:
  Errc code_;
};

[[noreturn]] inline void fail(Errc code, const std::string& what) {
  throw Error(code, what);
}

}  // namespace fsdp
