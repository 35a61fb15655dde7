// C entry points for units.
#include <optional>
#include <string>

#include "capi/descriptors.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"

using fsdp::Errc;
using fsdp::Error;
using fsdp::fail;
using fsdp::Unit;
using fsdp::capi::guard;
using fsdp::capi::unit_from;

namespace {

std::size_t param_index(const Unit& u, int index) {
  const std::size_t n = u.layout().num_params();
  if (index < 0 || static_cast<std::size_t>(index) >= n)
    fail(Errc::OutOfRange, u.label() + ": index = " + std::to_string(index) + ": the unit has " +
                               std::to_string(n) + " parameters (0.." + std::to_string(n - 1) +
                               ")");
  return static_cast<std::size_t>(index);
}

void require_output(const void* p, const char* arg) {
  if (!p) fail(Errc::InvalidArgument, std::string(arg) + ": NULL output pointer");
}

}  // namespace

extern "C" {

fsdp_status_t fsdp_unit_create(fsdp_context_t ctx, int nparams, const fsdp_param_desc_t* descs,
                               const void* const* initial_values, fsdp_unit_t* unit) {
  return guard(__func__, [&] {
    fsdp::Context& c = fsdp::capi::context_from(ctx, "ctx");
    // This rank's argument errors join the collective check, so all ranks fail together.
    std::optional<Error> local;
    std::vector<fsdp::ParamSpec> specs;
    try {
      require_output(unit, "unit");
      specs = fsdp::capi::specs_from_descriptors(nparams, descs);
    } catch (const Error& e) {
      local = e;
    }
    Unit& u = c.create_unit(std::move(specs), initial_values, local);
    fsdp::capi::register_unit(&u);
    *unit = fsdp::capi::to_handle(&u);
  });
}

fsdp_status_t fsdp_unit_destroy(fsdp_unit_t* unit) {
  return guard(__func__, [&] {
    if (!unit) fail(Errc::InvalidArgument, "unit: NULL pointer to a unit handle");
    Unit& u = unit_from(*unit, "*unit");
    fsdp::capi::retire(&u, fsdp::capi::Retired::Destroyed);
    u.context().destroy_unit(u);
    *unit = nullptr;
  });
}

fsdp_status_t fsdp_unshard(fsdp_unit_t unit) {
  return guard(__func__, [&] { unit_from(unit, "unit").unshard(); });
}

fsdp_status_t fsdp_reshard(fsdp_unit_t unit) {
  return guard(__func__, [&] { unit_from(unit, "unit").reshard(); });
}

fsdp_status_t fsdp_param_data(fsdp_unit_t unit, int index, void** data) {
  return guard(__func__, [&] {
    const Unit& u = unit_from(unit, "unit");
    const std::size_t i = param_index(u, index);
    require_output(data, "data");
    *data = u.param_data(i);
  });
}

fsdp_status_t fsdp_grad_data(fsdp_unit_t unit, int index, void** data) {
  return guard(__func__, [&] {
    Unit& u = unit_from(unit, "unit");
    const std::size_t i = param_index(u, index);
    require_output(data, "data");
    if (!u.layout().param(i).requires_grad)
      fail(Errc::InvalidArgument, u.label() + ": index = " + std::to_string(index) + " ('" +
                                      u.layout().param(i).name +
                                      "'): the parameter has requires_grad = 0");
    *data = u.grad_data(i);
  });
}

fsdp_status_t fsdp_reduce_grads(fsdp_unit_t unit) {
  return guard(__func__, [&] { unit_from(unit, "unit").reduce_grads(); });
}

fsdp_status_t fsdp_zero_grads(fsdp_unit_t unit) {
  return guard(__func__, [&] { unit_from(unit, "unit").zero_grads(); });
}

fsdp_status_t fsdp_shard_data(fsdp_unit_t unit, void** data, size_t* numel) {
  return guard(__func__, [&] {
    const Unit& u = unit_from(unit, "unit");
    if (data) *data = u.shard_data();
    if (numel) *numel = u.layout().shard_numel();
  });
}

fsdp_status_t fsdp_shard_grad(fsdp_unit_t unit, void** data, size_t* numel) {
  return guard(__func__, [&] {
    Unit& u = unit_from(unit, "unit");
    if (data) *data = u.shard_grad();
    if (numel) *numel = u.layout().shard_numel();
  });
}

fsdp_status_t fsdp_param_shard_range(fsdp_unit_t unit, int index, size_t* shard_offset,
                                     size_t* param_offset, size_t* length) {
  return guard(__func__, [&] {
    const Unit& u = unit_from(unit, "unit");
    const fsdp::ShardSlice s = u.slice(param_index(u, index));
    if (shard_offset) *shard_offset = s.shard_offset;
    if (param_offset) *param_offset = s.param_offset;
    if (length) *length = s.length;
  });
}

fsdp_status_t fsdp_unit_numel(fsdp_unit_t unit, size_t* numel, size_t* padded_numel,
                              size_t* shard_numel) {
  return guard(__func__, [&] {
    const fsdp::FlatLayout& l = unit_from(unit, "unit").layout();
    if (numel) *numel = l.numel();
    if (padded_numel) *padded_numel = l.padded_numel();
    if (shard_numel) *shard_numel = l.shard_numel();
  });
}

fsdp_status_t fsdp_unit_info(fsdp_unit_t unit, int* nparams, fsdp_dtype_t* dtype) {
  return guard(__func__, [&] {
    const fsdp::FlatLayout& l = unit_from(unit, "unit").layout();
    if (nparams) *nparams = static_cast<int>(l.num_params());
    if (dtype) *dtype = static_cast<fsdp_dtype_t>(l.dtype());
  });
}

fsdp_status_t fsdp_param_numel(fsdp_unit_t unit, int index, size_t* numel) {
  return guard(__func__, [&] {
    const Unit& u = unit_from(unit, "unit");
    const std::size_t i = param_index(u, index);
    require_output(numel, "numel");
    *numel = u.layout().param(i).numel;
  });
}

}  // extern "C"
