// The ABI's structs that grow at their end (options, hyperparameters, statistics) start with
// their size as the caller compiled it. The library reads and writes only that many bytes, so a
// program built against an older, shorter struct keeps working; newer fields take defaults.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include "base/error.hpp"

namespace fsdp::capi {

// An input struct: `in`'s first in->size bytes over `defaults`. `initializer` names what the
// caller should have used. The size must at least cover itself; beyond 64 KiB it is garbage.
template <class T>
T read_sized(const T& in, T defaults, const std::string& arg, const char* initializer) {
  const std::size_t size = in.size;
  if (size < sizeof(std::size_t) || size > (std::size_t(1) << 16))
    fail(Errc::InvalidArgument,
         arg + "->size = " + std::to_string(size) + ": initialize it with " + initializer);
  std::memcpy(&defaults, &in, size < sizeof defaults ? size : sizeof defaults);
  defaults.size = sizeof defaults;
  return defaults;
}

// An output struct: the first out->size bytes of `value` (whose size field is set to them).
template <class T>
void write_sized(T* out, T value, const std::string& arg) {
  const std::size_t size = out->size;
  if (size < sizeof(std::size_t))
    fail(Errc::InvalidArgument,
         arg + "->size = " + std::to_string(size) + ": set it to sizeof the struct");
  value.size = size < sizeof value ? size : sizeof value;
  std::memcpy(out, &value, value.size);
}

}  // namespace fsdp::capi
