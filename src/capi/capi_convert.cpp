// fsdp_convert: the library's dtype conversions, for callers' own buffers.
#include <string>

#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "memory/host/host_kernels.hpp"

void fsdp::capi::body::fsdp_convert(void* dst, const fsdp_dtype_t& dst_dtype, const void* src,
                                    const fsdp_dtype_t& src_dtype, size_t n) {
  const int dst_t = fsdp::capi::enum_int(dst_dtype), src_t = fsdp::capi::enum_int(src_dtype);
  if (dst_t < 0 || dst_t >= FSDP_DTYPE_COUNT)
    fail(Errc::InvalidArgument, "dst_dtype = " + std::to_string(dst_t) + ": not an fsdp_dtype_t");
  if (src_t < 0 || src_t >= FSDP_DTYPE_COUNT)
    fail(Errc::InvalidArgument, "src_dtype = " + std::to_string(src_t) + ": not an fsdp_dtype_t");
  if (n == 0) return;
  if (!dst || !src) fail(Errc::InvalidArgument, std::string(dst ? "src" : "dst") + ": NULL");
  const auto dt = static_cast<fsdp::DType>(dst_t), st = static_cast<fsdp::DType>(src_t);
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  const std::size_t dbytes = n * fsdp::dtype_size(dt), sbytes = n * fsdp::dtype_size(st);
  if (d < s + sbytes && s < d + dbytes) fail(Errc::InvalidArgument, "dst and src overlap");
  fsdp::host::convert(dst, dt, src, st, n);
}
