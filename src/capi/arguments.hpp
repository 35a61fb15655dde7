// Checks of a caller's arguments shared by the C entry points (the generated ones check every
// required output with require_output): each failure is FSDP_ERR_INVALID_ARGUMENT naming the
// argument (guard() prefixes the call).
#pragma once

#include <string>

#include "base/error.hpp"

namespace fsdp::capi {

// An output pointer the call must write through.
inline void require_output(const void* p, const char* arg) {
  if (!p) fail(Errc::InvalidArgument, std::string(arg) + ": NULL output pointer");
}
inline void require_output(const void* p, const std::string& arg) {
  require_output(p, arg.c_str());
}

}  // namespace fsdp::capi
