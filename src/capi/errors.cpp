// Status strings, the thread-local last-error message, and versions.
#include <string>

#include "base/dtype.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "fsdp.h"

namespace fsdp::capi {
namespace {

thread_local std::string last_error;

}  // namespace

// The core's enums mirror the ABI's without including it; these keep them in step.
static_assert(static_cast<int>(Errc::InvalidArgument) == FSDP_ERR_INVALID_ARGUMENT, "");
static_assert(static_cast<int>(Errc::InvalidHandle) == FSDP_ERR_INVALID_HANDLE, "");
static_assert(static_cast<int>(Errc::DestroyedHandle) == FSDP_ERR_DESTROYED_HANDLE, "");
static_assert(static_cast<int>(Errc::Finalized) == FSDP_ERR_FINALIZED, "");
static_assert(static_cast<int>(Errc::OutOfRange) == FSDP_ERR_OUT_OF_RANGE, "");
static_assert(static_cast<int>(Errc::State) == FSDP_ERR_STATE, "");
static_assert(static_cast<int>(Errc::Mismatch) == FSDP_ERR_MISMATCH, "");
static_assert(static_cast<int>(Errc::Version) == FSDP_ERR_VERSION, "");
static_assert(static_cast<int>(Errc::Unsupported) == FSDP_ERR_UNSUPPORTED, "");
static_assert(static_cast<int>(Errc::OutOfMemory) == FSDP_ERR_OUT_OF_MEMORY, "");
static_assert(static_cast<int>(Errc::Mpi) == FSDP_ERR_MPI, "");
static_assert(static_cast<int>(Errc::Internal) == FSDP_ERR_INTERNAL, "");
static_assert(static_cast<int>(Errc::Callback) == FSDP_ERR_CALLBACK, "");
static_assert(static_cast<int>(Errc::Io) == FSDP_ERR_IO, "");
static_assert(static_cast<int>(Errc::Format) == FSDP_ERR_FORMAT, "");
static_assert(static_cast<int>(Errc::Corrupt) == FSDP_ERR_CORRUPT, "");
static_assert(static_cast<int>(Errc::Cuda) == FSDP_ERR_CUDA, "");
static_assert(static_cast<int>(Errc::Nccl) == FSDP_ERR_NCCL, "");
static_assert(static_cast<int>(Errc::Aborted) == FSDP_ERR_ABORTED, "");
static_assert(static_cast<int>(Errc::Timeout) == FSDP_ERR_TIMEOUT, "");
static_assert(static_cast<int>(Errc::StepBoundary) == FSDP_ERR_STEP_BOUNDARY, "");
static_assert(static_cast<int>(DType::Float32) == FSDP_FLOAT32, "");
static_assert(static_cast<int>(DType::Float64) == FSDP_FLOAT64, "");
static_assert(static_cast<int>(DType::BFloat16) == FSDP_BFLOAT16, "");
static_assert(static_cast<int>(DType::Float16) == FSDP_FLOAT16, "");
static_assert(kDTypeCount == FSDP_DTYPE_COUNT, "");

fsdp_status_t record_error(const char* call, Errc code, const char* what) noexcept {
  try {
    last_error = std::string(call) + ": " + what;
  } catch (...) {
    last_error.clear();  // no memory for the message; the status still tells
  }
  return static_cast<fsdp_status_t>(code);
}

}  // namespace fsdp::capi

using fsdp::Errc;

extern "C" {

const char* fsdp_status_string(fsdp_status_t status) {
  switch (fsdp::capi::enum_int(status)) {
    case FSDP_SUCCESS: return "FSDP_SUCCESS: no error";
    case FSDP_ERR_INVALID_ARGUMENT: return "FSDP_ERR_INVALID_ARGUMENT: an argument is invalid";
    case FSDP_ERR_INVALID_HANDLE: return "FSDP_ERR_INVALID_HANDLE: NULL or foreign handle";
    case FSDP_ERR_DESTROYED_HANDLE: return "FSDP_ERR_DESTROYED_HANDLE: the unit was destroyed";
    case FSDP_ERR_FINALIZED: return "FSDP_ERR_FINALIZED: the context was finalized";
    case FSDP_ERR_OUT_OF_RANGE: return "FSDP_ERR_OUT_OF_RANGE: index out of range";
    case FSDP_ERR_STATE: return "FSDP_ERR_STATE: the unit is not in the required state";
    case FSDP_ERR_MISMATCH: return "FSDP_ERR_MISMATCH: ranks disagree on a collective call";
    case FSDP_ERR_VERSION: return "FSDP_ERR_VERSION: header and library versions differ";
    case FSDP_ERR_UNSUPPORTED: return "FSDP_ERR_UNSUPPORTED: not supported by this build";
    case FSDP_ERR_OUT_OF_MEMORY: return "FSDP_ERR_OUT_OF_MEMORY: an allocation failed";
    case FSDP_ERR_MPI: return "FSDP_ERR_MPI: an MPI call failed";
    case FSDP_ERR_INTERNAL: return "FSDP_ERR_INTERNAL: internal error in libfsdp";
    case FSDP_ERR_CALLBACK: return "FSDP_ERR_CALLBACK: a callback of the caller's returned nonzero";
    case FSDP_ERR_IO: return "FSDP_ERR_IO: a file operation failed";
    case FSDP_ERR_FORMAT: return "FSDP_ERR_FORMAT: not an fsdp checkpoint, or malformed";
    case FSDP_ERR_CORRUPT: return "FSDP_ERR_CORRUPT: checksum mismatch or truncated file";
    case FSDP_ERR_CUDA: return "FSDP_ERR_CUDA: a CUDA runtime call failed";
    case FSDP_ERR_NCCL: return "FSDP_ERR_NCCL: an NCCL call failed";
    case FSDP_ERR_ABORTED: return "FSDP_ERR_ABORTED: the context was aborted (fsdp_abort)";
    case FSDP_ERR_TIMEOUT:
      return "FSDP_ERR_TIMEOUT: a collective call or a wait did not complete within the timeout";
    case FSDP_ERR_STEP_BOUNDARY:
      return "FSDP_ERR_STEP_BOUNDARY: the step boundary (fsdp_step_boundary) was missed or "
             "doubled, or a parameter update came outside its update phase";
    case FSDP_STATUS_COUNT: break;
  }
  return "unknown fsdp_status_t value";
}

const char* fsdp_last_error(void) {
  return fsdp::capi::last_error.c_str();
}

fsdp_status_t fsdp_record_error(fsdp_status_t status, const char* call, const char* message) {
  return fsdp::capi::record_error(call ? call : "(binding)", static_cast<Errc>(status),
                                  message ? message : "");
}

}  // extern "C"

namespace fsdp::capi::body {

void fsdp_get_version(int* major, int* minor, int* patch) {
  if (major) *major = FSDP_VERSION_MAJOR;
  if (minor) *minor = FSDP_VERSION_MINOR;
  if (patch) *patch = FSDP_VERSION_PATCH;
}

void fsdp_check_version(int major, int minor, int patch) {
  if (major != FSDP_VERSION_MAJOR || minor > FSDP_VERSION_MINOR)
    fsdp::fail(Errc::Version,
               "program compiled against libfsdp " + std::to_string(major) + "." +
                   std::to_string(minor) + "." + std::to_string(patch) +
                   " headers cannot run with library " + std::to_string(FSDP_VERSION_MAJOR) + "." +
                   std::to_string(FSDP_VERSION_MINOR) + "." + std::to_string(FSDP_VERSION_PATCH) +
                   " (the major versions must match and the library's minor must be at least "
                   "the header's)");
}

}  // namespace fsdp::capi::body
