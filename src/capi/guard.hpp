// The one place where C++ exceptions become status codes: every C entry point is
//   return guard("fsdp_x", [&] { ... });
// (generated from fsdp.h: bindings/capi_entries.py) and nothing throws across the ABI.
#pragma once

#include <cstring>
#include <new>

#include "base/error.hpp"
#include "fsdp.h"

namespace fsdp::capi {

// The int a C caller stored in an enum argument or field. C lets any int live there, but in C++
// reading an enum object outside its enumerators' range is undefined behaviour, which would let
// the compiler drop the very range check that rejects it: every enum from the caller is read
// through this, checked as an int, and only then converted.
template <class E>
int enum_int(const E& value) noexcept {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int v;
  std::memcpy(&v, &value, sizeof v);
  return v;
}

// Records "<call>: <what>" as the calling thread's last error and returns the status for `code`.
fsdp_status_t record_error(const char* call, Errc code, const char* what) noexcept;

template <class Body>
fsdp_status_t guard(const char* call, Body&& body) noexcept {
  try {
    body();
    return FSDP_SUCCESS;
  } catch (const Error& e) {
    return record_error(call, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return record_error(call, Errc::OutOfMemory, "out of host memory");
  } catch (const std::exception& e) {
    return record_error(call, Errc::Internal, e.what());
  } catch (...) {
    return record_error(call, Errc::Internal, "unknown exception");
  }
}

}  // namespace fsdp::capi
