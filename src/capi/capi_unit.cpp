// C entry points for units.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "base/agreement.hpp"
#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/config.hpp"
#include "capi/descriptors.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/resolved_param.hpp"
#include "capi/sized_struct.hpp"
#include "core/unit_gather.hpp"

using fsdp::Errc;
using fsdp::Error;
using fsdp::fail;
using fsdp::Unit;
using fsdp::capi::param_index;
using fsdp::capi::require_output;
using fsdp::capi::resolve_param;
using fsdp::capi::ResolvedParam;
using fsdp::capi::unit_from;

namespace fsdp::capi {

ResolvedParam resolve_param(Unit& u, int index) {
  const std::size_t own = u.layout().num_params(), ties = u.ties().size();
  if (index >= 0 && static_cast<std::size_t>(index) < own)
    return {&u, static_cast<std::size_t>(index), nullptr};
  if (index >= 0 && static_cast<std::size_t>(index) < own + ties) {
    const fsdp::Tie& t = u.ties()[static_cast<std::size_t>(index) - own];
    Unit* owner = u.context().find_unit(t.owner_id);
    if (!owner) fail(Errc::Internal, u.label() + ": tie to a unit that no longer exists");
    return {owner, t.owner_index, &t};
  }
  fail(Errc::OutOfRange, u.label() + ": index = " + std::to_string(index) + ": the unit has " +
                             std::to_string(own) + " parameters and " + std::to_string(ties) +
                             " tied ones (0.." + std::to_string(own + ties - 1) + ")");
}

}  // namespace fsdp::capi

namespace {

// Reads at most options->size bytes; newer fields keep their defaults.
fsdp_unit_options_t read_options(const fsdp_unit_options_t* options) {
  const fsdp_unit_options_t defaults = FSDP_UNIT_OPTIONS_INIT;
  return options ? fsdp::capi::read_sized(*options, defaults, "options", "FSDP_UNIT_OPTIONS_INIT")
                 : defaults;
}

fsdp::Context::UnitRequest request_from(const fsdp_unit_options_t& o, int nparams,
                                        const fsdp_param_desc_t* descs,
                                        const void* const* initial_values, int world_rank) {
  fsdp::Context::UnitRequest r;
  r.precision.param =
      fsdp::capi::optional_dtype(fsdp::capi::enum_int(o.param_dtype), "options->param_dtype");
  r.precision.reduce =
      fsdp::capi::optional_dtype(fsdp::capi::enum_int(o.reduce_dtype), "options->reduce_dtype");
  const int64_t layout = o.layout;
  if (layout < 0 || layout >= FSDP_UNIT_LAYOUT_COUNT)
    fail(Errc::InvalidArgument,
         "options->layout = " + std::to_string(layout) +
             ": not a fsdp_unit_layout_t (FSDP_LAYOUT_FLAT, FSDP_LAYOUT_DIM0)");
  r.layout = static_cast<fsdp::ShardLayout>(layout);
  if (o.used_by < 0 || o.used_by >= FSDP_UNIT_USE_COUNT)
    fail(Errc::InvalidArgument,
         "options->used_by = " + std::to_string(o.used_by) +
             ": not a fsdp_unit_use_t (FSDP_USED_BY_ALL_RANKS, FSDP_USED_BY_ANY_RANKS)");
  r.any_ranks = o.used_by == FSDP_USED_BY_ANY_RANKS;
  if (o.name) r.name = o.name;
  r.source.values = initial_values;
  r.source.from_rank0 = o.sync_from_rank0 != 0;
  if (o.init) {
    if (initial_values)
      fail(Errc::InvalidArgument,
           "initial_values: must be NULL when options->init is set (the callback provides them)");
    const fsdp_init_fn fn = o.init;
    void* user = o.init_user_data;
    r.source.init = [fn, user, descs, nparams, world_rank](std::size_t i, void* data) {
      const int index = static_cast<int>(i);
      if (index >= nparams) fail(Errc::Internal, "init callback index out of range");
      const int rc = fn(user, index, &descs[index], data);
      if (rc != 0)
        fail(Errc::Callback, "options->init returned " + std::to_string(rc) + " for descs[" +
                                 std::to_string(index) + "] ('" + descs[index].name +
                                 "') on rank " + std::to_string(world_rank));
    };
  }
  return r;
}

// `local`: this rank's argument errors found by the entry point (a NULL `unit`); they and the
// ones found here join the collective check, so all ranks fail together.
void create_unit(std::optional<Error> local, fsdp::Context& c, int nparams,
                 const fsdp_param_desc_t* descs, const void* const* initial_values,
                 const fsdp_unit_options_t* options, fsdp_unit_t* unit) {
  std::vector<fsdp::ParamSpec> specs;
  fsdp::Context::UnitRequest request;
  if (!local)
    local = fsdp::attempt([&] {
      specs = fsdp::capi::specs_from_descriptors(nparams, descs);
      request = request_from(read_options(options), nparams, descs, initial_values,
                             c.groups().world().rank);
    });
  Unit& u = c.create_unit(std::move(specs), request, local);
  fsdp::capi::register_unit(&u);
  *unit = fsdp::capi::to_handle(&u);
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_unit_create(std::optional<fsdp::Error> local, fsdp::Context& ctx, int nparams,
                      const fsdp_param_desc_t* descs, const void* const* initial_values,
                      fsdp_unit_t* unit) {
  create_unit(std::move(local), ctx, nparams, descs, initial_values, nullptr, unit);
}

void fsdp_unit_create_ex(std::optional<fsdp::Error> local, fsdp::Context& ctx, int nparams,
                         const fsdp_param_desc_t* descs, const void* const* initial_values,
                         const fsdp_unit_options_t* options, fsdp_unit_t* unit) {
  create_unit(std::move(local), ctx, nparams, descs, initial_values, options, unit);
}

void fsdp_unit_destroy(fsdp_unit_t* unit) {
  Unit& u = unit_from(*unit, "*unit");
  u.context().scheduler().release_unclaimed("at fsdp_unit_destroy", &u);
  if (std::optional<Error> refusal = u.destroy_refusal())
    fail(refusal->code(), "*unit: " + std::string(refusal->what()));
  fsdp::capi::retire(&u, fsdp::capi::Retired::Destroyed);
  u.context().destroy_unit(u);
  *unit = nullptr;
}

void fsdp_unit_tie(fsdp::Unit& u, const char* alias, fsdp_unit_t owner, int owner_index,
                   int* alias_index) {
  std::optional<Error> local;
  Unit* o = nullptr;
  std::size_t idx = 0;
  local = fsdp::attempt([&] {
    o = &unit_from(owner, "owner");
    idx = param_index(*o, owner_index);
    if (!alias || !*alias) fail(Errc::InvalidArgument, "alias: NULL or empty");
    u.check_tie(alias, *o);
  });
  u.context().tie(u, alias ? alias : "", o, idx, local);
  if (alias_index) *alias_index = static_cast<int>(u.layout().num_params() + u.ties().size() - 1);
}

void fsdp_unshard(fsdp::Unit& u) {
  u.context().scheduler().caller_unshard(u, /*async=*/false);
  u.complete_pending();
}

void fsdp_reshard(fsdp::Unit& unit) {
  unit.reshard();
}

void fsdp_param_data(fsdp::Unit& u, int index, void** data) {
  const ResolvedParam r = resolve_param(u, index);
  if (r.tie && !r.unit->held_by_caller())
    fail(Errc::State, u.label() + ": index = " + std::to_string(index) + " ('" + r.tie->alias +
                          "') is tied to '" + r.unit->layout().param(r.index).name + "' of " +
                          r.unit->label() + ", which is sharded: unshard " + r.unit->label() +
                          " while " + u.label() + " uses it");
  *data = r.unit->param_data(r.index);
}

void fsdp_grad_data(fsdp::Unit& u, int index, void** data) {
  const ResolvedParam r = resolve_param(u, index);
  if (!r.unit->layout().param(r.index).requires_grad)
    fail(Errc::InvalidArgument, u.label() + ": index = " + std::to_string(index) + " ('" +
                                    r.unit->layout().param(r.index).name +
                                    "'): the parameter has requires_grad = 0");
  *data = r.unit->grad_data(r.index);  // a tie adds into the owner's full gradient
}

void fsdp_reduce_grads(fsdp::Unit& u) {
  u.reduce_grads();
}

void fsdp_zero_grads(fsdp::Unit& unit) {
  unit.zero_grads();
}

void fsdp_grad_set_none(fsdp::Unit& u, int index, int none) {
  u.set_grad_none(fsdp::capi::trainable_index(u, index), none != 0);
}

void fsdp_grad_none(fsdp::Unit& u, int* none, int count) {
  const std::size_t n = u.layout().num_params();
  if (count < 0 || static_cast<std::size_t>(count) != n)
    fail(Errc::InvalidArgument, "count = " + std::to_string(count) + ": " + u.label() + " has " +
                                    std::to_string(n) + " parameters");
  for (std::size_t i = 0; i < n; ++i) none[i] = u.grad_none(i) ? 1 : 0;
}

void fsdp_shard_data(fsdp::Unit& u, void** data, size_t* numel) {
  u.refuse_split_shard(__func__);
  if (data) {
    *data = u.shard_data();
    u.drop_secondary();                       // hpZ: the caller may write the shard from here on
    u.context().before_cpu_touches_shards();  // offloaded: the CPU may read it now
    u.context().shard_memory().handover_to_caller();
  }
  if (numel) *numel = u.layout().shard_numel();
}

void fsdp_shard_grad(fsdp::Unit& u, void** data, size_t* numel) {
  u.refuse_piece_view("the gradient shard");
  if (data) {
    if (u.layout().grad_shard_numel() == 0)
      fail(Errc::InvalidArgument,
           u.label() +
               ": every parameter is frozen (requires_grad = 0): there is no gradient "
               "shard");
    *data = u.shard_grad();
    u.context().before_cpu_touches_shards();
    u.context().shard_memory().handover_to_caller();
  }
  if (numel) *numel = u.layout().grad_shard_numel();
}

void fsdp_unit_precision(fsdp::Unit& unit, fsdp_dtype_t* storage, fsdp_dtype_t* param_dtype,
                         fsdp_dtype_t* reduce_dtype) {
  const fsdp::Precision& p = unit.precision();
  if (storage) *storage = static_cast<fsdp_dtype_t>(p.storage);
  if (param_dtype) *param_dtype = static_cast<fsdp_dtype_t>(p.param);
  if (reduce_dtype) *reduce_dtype = static_cast<fsdp_dtype_t>(p.reduce);
}

void fsdp_unit_set_grad_sync(fsdp::Unit& u, int enabled) {
  if (enabled != 0 && enabled != 1)
    fail(Errc::InvalidArgument, "enabled = " + std::to_string(enabled) + ": must be 0 or 1");
  u.set_grad_sync(enabled != 0);
}

void fsdp_unit_set_grad_divide_factor(fsdp::Unit& u, double factor) {
  if (!std::isfinite(factor) || factor < 0.0)
    fail(Errc::InvalidArgument,
         "factor = " + std::to_string(factor) + ": must be > 0 and finite, or 0 (the context's)");
  u.set_grad_divide_factor(factor);
}

void fsdp_unit_grad_sync(fsdp::Unit& u, int* enabled) {
  *enabled = u.grad_sync() ? 1 : 0;
}

void fsdp_unit_zero_copy(fsdp::Unit& u, int* zero_copy) {
  *zero_copy = u.zero_copy() ? 1 : 0;
}

void fsdp_param_shard_range(fsdp::Unit& u, int index, size_t* shard_offset, size_t* param_offset,
                            size_t* length) {
  const ResolvedParam r =
      resolve_param(u, index);  // an alias: the owner's parameter, in the owner's shard
  const fsdp::ShardSlice s = r.unit->slice(r.index);
  if (shard_offset) *shard_offset = s.shard_offset;
  if (param_offset) *param_offset = s.param_offset;
  if (length) *length = s.length;
}

void fsdp_gather_params(fsdp::Unit& u, void* const* values) {
  const std::optional<Error> local = fsdp::attempt([&] {
    if (!values) fail(Errc::InvalidArgument, "values: NULL array of destinations");
  });
  fsdp::gather_masters(u, values, local);
}

void fsdp_unit_numel(fsdp::Unit& unit, size_t* numel, size_t* padded_numel, size_t* shard_numel) {
  const fsdp::FlatLayout& l = unit.layout();
  if (numel) *numel = l.numel();
  if (padded_numel) *padded_numel = l.padded_numel();
  if (shard_numel) *shard_numel = l.shard_numel();
}

void fsdp_unit_info(fsdp::Unit& unit, int* nparams, fsdp_dtype_t* dtype) {
  const fsdp::FlatLayout& l = unit.layout();
  if (nparams) *nparams = static_cast<int>(l.num_params());
  if (dtype) *dtype = static_cast<fsdp_dtype_t>(l.dtype());
}

void fsdp_param_numel(fsdp::Unit& u, int index, size_t* numel) {
  const ResolvedParam r = resolve_param(u, index);
  *numel = r.unit->layout().param(r.index).numel;
}

void fsdp_param_info(fsdp::Unit& u, int index, const char** name, int* ndim, int64_t* shape,
                     fsdp_dtype_t* dtype, int* requires_grad) {
  const ResolvedParam r = resolve_param(u, index);
  const fsdp::ParamSpec& p = r.unit->layout().param(r.index);
  if (name) *name = r.tie ? r.tie->alias.c_str() : p.name.c_str();
  if (ndim) *ndim = static_cast<int>(p.shape.size());
  if (shape) std::copy(p.shape.begin(), p.shape.end(), shape);
  if (dtype) *dtype = static_cast<fsdp_dtype_t>(p.dtype);
  if (requires_grad) *requires_grad = p.requires_grad ? 1 : 0;
}

}  // namespace fsdp::capi::body
