#include "capi/descriptors.hpp"

#include <cstdint>
#include <string>
#include <unordered_map>

#include "base/error.hpp"
#include "capi/guard.hpp"

namespace fsdp::capi {
namespace {

std::string at(int i, const char* field) {
  return "descs[" + std::to_string(i) + "]." + field;
}

// Element counts are kept below 2^62 bytes, so offsets and byte sizes never overflow size_t.
constexpr uint64_t kMaxBytes = uint64_t(1) << 62;

ParamSpec spec_from(const fsdp_param_desc_t& d, int i) {
  ParamSpec p;
  if (!d.name || !*d.name) fail(Errc::InvalidArgument, at(i, "name") + ": NULL or empty");
  p.name = d.name;
  const std::string who = " ('" + p.name + "')";
  const int dtype = enum_int(d.dtype);
  if (dtype < 0 || dtype >= FSDP_DTYPE_COUNT)
    fail(Errc::InvalidArgument,
         at(i, "dtype") + " = " + std::to_string(dtype) + who + ": not an fsdp_dtype_t");
  p.dtype = static_cast<DType>(dtype);
  if (!dtype_storable(p.dtype))
    fail(Errc::InvalidArgument,
         at(i, "dtype") + " = " + dtype_name(p.dtype) + who +
             ": parameters are stored in float32 or float64; for bfloat16 or float16 compute, "
             "set param_dtype (fsdp_config_t or fsdp_unit_options_t)");
  if (d.ndim < 0 || d.ndim > FSDP_MAX_NDIM)
    fail(Errc::InvalidArgument, at(i, "ndim") + " = " + std::to_string(d.ndim) + who +
                                    ": must be between 0 and " + std::to_string(FSDP_MAX_NDIM));
  if (d.ndim > 0 && !d.shape) fail(Errc::InvalidArgument, at(i, "shape") + who + ": NULL");
  uint64_t numel = 1;
  for (int k = 0; k < d.ndim; ++k) {
    const int64_t e = d.shape[k];
    const std::string field = "shape[" + std::to_string(k) + "]";
    if (e <= 0)
      fail(Errc::InvalidArgument,
           at(i, field.c_str()) + " = " + std::to_string(e) + who + ": extents must be positive");
    if (static_cast<uint64_t>(e) > kMaxBytes / dtype_size(p.dtype) / numel)
      fail(Errc::InvalidArgument, at(i, "shape") + who + ": the parameter is too large");
    numel *= static_cast<uint64_t>(e);
    p.shape.push_back(e);
  }
  p.numel = static_cast<std::size_t>(numel);
  p.requires_grad = d.requires_grad != 0;
  return p;
}

}  // namespace

std::vector<ParamSpec> specs_from_descriptors(int nparams, const fsdp_param_desc_t* descs) {
  if (nparams < 1)
    fail(Errc::InvalidArgument,
         "nparams = " + std::to_string(nparams) + ": a unit needs at least one parameter");
  if (!descs) fail(Errc::InvalidArgument, "descs: NULL");
  std::vector<ParamSpec> specs;
  specs.reserve(static_cast<std::size_t>(nparams));
  std::unordered_map<std::string, int> seen;
  uint64_t total_bytes = 0;
  for (int i = 0; i < nparams; ++i) {
    ParamSpec p = spec_from(descs[i], i);
    if (i > 0 && p.dtype != specs[0].dtype)
      fail(Errc::InvalidArgument, at(i, "dtype") + " = " + dtype_name(p.dtype) +
                                      " but descs[0].dtype = " + dtype_name(specs[0].dtype) +
                                      ": all parameters of a unit share one dtype");
    auto [it, fresh] = seen.emplace(p.name, i);
    if (!fresh)
      fail(Errc::InvalidArgument, at(i, "name") + " = '" + p.name + "': already used by descs[" +
                                      std::to_string(it->second) + "]");
    total_bytes += p.numel * dtype_size(p.dtype);
    if (total_bytes > kMaxBytes) fail(Errc::InvalidArgument, "descs: the unit is too large");
    specs.push_back(std::move(p));
  }
  return specs;
}

}  // namespace fsdp::capi
