// Queries for the bindings: each answers with the rule the library itself applies (parameter
// groups, an optimizer kind's state and hyperparameters, storage and precision dtypes), so that
// Python, Fortran and converters ask instead of keeping copies that drift.
#include <optional>
#include <string>
#include <vector>

#include "capi/arguments.hpp"
#include "capi/config.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/sized_struct.hpp"
#include "core/context.hpp"
#include "core/precision.hpp"
#include "optim/group_match.hpp"
#include "optim/optimizer.hpp"

using fsdp::DType;
using fsdp::Errc;
using fsdp::fail;
using fsdp::OptimizerKind;
using fsdp::capi::enum_int;
using fsdp::capi::require_output;

namespace {

// By reference: a value outside the enum is read as an int (enum_int), never loaded as the enum.
OptimizerKind kind_from(const fsdp_optimizer_kind_t& kind) {
  const int k = enum_int(kind);
  if (k < 0 || k >= FSDP_OPTIMIZER_KIND_COUNT)
    fail(Errc::InvalidArgument, "kind = " + std::to_string(k) + ": not an fsdp_optimizer_kind_t");
  return static_cast<OptimizerKind>(k);
}

// Index `index` of a list of `count`; OUT_OF_RANGE naming the kind otherwise.
std::size_t list_index(int index, std::size_t count, OptimizerKind kind, const char* what) {
  if (index < 0 || static_cast<std::size_t>(index) >= count)
    fail(Errc::OutOfRange, "index = " + std::to_string(index) + ": " + fsdp::kind_name(kind) +
                               " has " + std::to_string(count) + " " + what);
  return static_cast<std::size_t>(index);
}

DType dtype_from(const fsdp_dtype_t& dtype, const char* arg) {
  const int t = enum_int(dtype);
  if (t < 0 || t >= FSDP_DTYPE_COUNT)
    fail(Errc::InvalidArgument, std::string(arg) + " = " + std::to_string(t) +
                                    ": not an fsdp_dtype_t (FSDP_DTYPE_AUTO is not one here)");
  return static_cast<DType>(t);
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_param_group_of(const char* const* patterns, int npatterns, const char* name, int* group) {
  if (npatterns < 1)
    fail(Errc::InvalidArgument, "npatterns = " + std::to_string(npatterns) +
                                    ": at least group 0 (the defaults) is needed");
  if (!patterns) fail(Errc::InvalidArgument, "patterns: NULL");
  for (int g = 1; g < npatterns; ++g)
    if (!patterns[g] || !*patterns[g])
      fail(Errc::InvalidArgument, "patterns[" + std::to_string(g) + "]: NULL or empty");
  if (!name) fail(Errc::InvalidArgument, "name: NULL");
  *group = fsdp::group_of(
      static_cast<std::size_t>(npatterns), [&](std::size_t g) { return patterns[g]; }, name);
}

void fsdp_optimizer_kind_info(const fsdp_optimizer_kind_t& kind, const char** name, int* nstates,
                              int* nhyperparams, int* step_count) {
  const OptimizerKind k = kind_from(kind);
  const fsdp::KindReads& reads = fsdp::kind_reads(k);
  if (name) *name = fsdp::kind_name(k);
  if (nstates) *nstates = static_cast<int>(fsdp::state_buffers(k).size());
  if (nhyperparams) *nhyperparams = static_cast<int>(reads.hyperparams.size());
  if (step_count) *step_count = reads.step_count ? 1 : 0;
}

void fsdp_optimizer_state_name(const fsdp_optimizer_kind_t& kind, int index, const char** name,
                               const char** kept_when) {
  const OptimizerKind k = kind_from(kind);
  const std::vector<fsdp::StateBuffer>& buffers = fsdp::state_buffers(k);
  const std::size_t i = list_index(index, buffers.size(), k, "state buffer(s)");
  *name = buffers[i].name;
  if (kept_when) *kept_when = buffers[i].kept_when;
}

void fsdp_optimizer_hyperparam_name(const fsdp_optimizer_kind_t& kind, int index,
                                    const char** name) {
  const OptimizerKind k = kind_from(kind);
  const std::vector<const char*>& names = fsdp::kind_reads(k).hyperparams;
  const std::size_t i = list_index(index, names.size(), k, "hyperparameter(s)");
  *name = names[i];
}

void fsdp_optimizer_defaults(const fsdp_optimizer_kind_t& kind, fsdp_hyperparams_t* hp) {
  static const fsdp_hyperparams_t sgd = FSDP_SGD_DEFAULTS, adamw = FSDP_ADAMW_DEFAULTS;
  const OptimizerKind k = kind_from(kind);
  require_output(hp, "hp");
  fsdp::capi::write_sized(hp, k == OptimizerKind::AdamW ? adamw : sgd, "hp");
}

void fsdp_storage_dtype(const fsdp_dtype_t& dtype, fsdp_dtype_t* storage) {
  const DType t = dtype_from(dtype, "dtype");
  *storage = static_cast<fsdp_dtype_t>(fsdp::storage_dtype(t));
}

void fsdp_precision_resolve(fsdp::Context* ctx, const fsdp_dtype_t& storage,
                            const fsdp_dtype_t& param_dtype, const fsdp_dtype_t& reduce_dtype,
                            fsdp_dtype_t* param_out, fsdp_dtype_t* reduce_out) {
  const fsdp::PrecisionRequest context = ctx ? ctx->options().precision : fsdp::PrecisionRequest{};
  const DType s = dtype_from(storage, "storage");
  if (!fsdp::dtype_storable(s))
    fail(Errc::InvalidArgument, std::string("storage = ") + fsdp::dtype_name(s) +
                                    ": parameters are stored in float32 or float64 "
                                    "(fsdp_storage_dtype)");
  fsdp::PrecisionRequest unit;
  unit.param = fsdp::capi::optional_dtype(enum_int(param_dtype), "param_dtype");
  unit.reduce = fsdp::capi::optional_dtype(enum_int(reduce_dtype), "reduce_dtype");
  const fsdp::Precision p = fsdp::resolve_precision(s, context, unit, "param_dtype, reduce_dtype");
  if (param_out) *param_out = static_cast<fsdp_dtype_t>(p.param);
  if (reduce_out) *reduce_out = static_cast<fsdp_dtype_t>(p.reduce);
}

}  // namespace fsdp::capi::body
