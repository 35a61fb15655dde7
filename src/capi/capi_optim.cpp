// C entry points for optimizers, gradient clipping and the gradient scaler.
#include <cmath>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/hyperparams.hpp"
#include "capi/sized_struct.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "optim/grad_norm.hpp"
#include "optim/registry.hpp"

using fsdp::Errc;
using fsdp::Error;
using fsdp::fail;
using fsdp::GradScaler;
using fsdp::HyperParams;
using fsdp::Optimizer;
using fsdp::OptimizerKind;
using fsdp::capi::enum_int;
using fsdp::capi::grad_scaler_from;
using fsdp::capi::optimizer_from;
using fsdp::capi::read_hyperparams;

namespace {

int group_index(const Optimizer& o, int group, bool allow_all) {
  if ((allow_all && group == -1) || (group >= 0 && group < o.num_groups())) return group;
  fail(Errc::OutOfRange, o.label() + ": group = " + std::to_string(group) + ": it has " +
                             std::to_string(o.num_groups()) + " group(s)" +
                             (allow_all ? " (-1: all)" : ""));
}

// `unit` as one of `o`'s units; INVALID_ARGUMENT naming both otherwise.
const fsdp::Unit& optimized_unit(const Optimizer& o, fsdp_unit_t unit) {
  const fsdp::Unit& u = fsdp::capi::unit_from(unit, "unit");
  for (const fsdp::Unit* v : o.units())
    if (v == &u) return u;
  fail(Errc::InvalidArgument, "unit: " + u.label() + " is not updated by " + o.label());
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_optimizer_create(std::optional<fsdp::Error> local, fsdp::Context& c,
                           const fsdp_optimizer_kind_t& kind, const fsdp_hyperparams_t* defaults,
                           int nunits, const fsdp_unit_t* units, fsdp_optimizer_t* opt) {
  std::vector<fsdp::Unit*> list;
  HyperParams h;
  const int kind_int = enum_int(kind);
  const OptimizerKind k = static_cast<OptimizerKind>(kind_int);
  if (!local)
    local = fsdp::attempt([&] {
      if (kind_int < 0 || kind_int >= FSDP_OPTIMIZER_KIND_COUNT)
        fail(Errc::InvalidArgument,
             "kind = " + std::to_string(kind_int) + ": not an fsdp_optimizer_kind_t");
      if (nunits < 1)
        fail(Errc::InvalidArgument,
             "nunits = " + std::to_string(nunits) + ": an optimizer needs at least one unit");
      if (!units) fail(Errc::InvalidArgument, "units: NULL");
      h = read_hyperparams(defaults, k, "defaults");
      std::unordered_set<fsdp::Unit*> seen;
      for (int i = 0; i < nunits; ++i) {
        const std::string arg = "units[" + std::to_string(i) + "]";
        fsdp::Unit& u = fsdp::capi::unit_from(units[i], arg.c_str());
        if (&u.context() != &c)
          fail(Errc::InvalidArgument, arg + ": " + u.label() + " belongs to another context");
        if (!seen.insert(&u).second)
          fail(Errc::InvalidArgument, arg + ": " + u.label() + " is listed twice");
        list.push_back(&u);
      }
    });
  Optimizer& o = fsdp::OptimizerRegistry::of(c).create_optimizer(k, h, std::move(list), local);
  fsdp::capi::register_optimizer(&o);
  *opt = fsdp::capi::to_handle(&o);
}

void fsdp_optimizer_destroy(fsdp_optimizer_t* opt) {
  Optimizer& o = optimizer_from(*opt, "*opt");
  fsdp::capi::retire(&o, fsdp::capi::Retired::Destroyed);
  fsdp::OptimizerRegistry::of(o.context()).destroy_optimizer(o);
  *opt = nullptr;
}

void fsdp_optimizer_add_group(fsdp::Optimizer& o, const char* pattern, const fsdp_hyperparams_t* hp,
                              int* group, int* nmatched) {
  o.context().scheduler().quiesce();
  std::optional<Error> local;
  HyperParams h;
  fsdp::Fingerprint f;
  local = fsdp::attempt([&] {
    if (!pattern || !*pattern) fail(Errc::InvalidArgument, "pattern: NULL or empty");
    if (!hp) fail(Errc::InvalidArgument, "hp: NULL");
    h = read_hyperparams(hp, o.kind(), "hp");
    f.add(std::string(pattern));
    f.add(h.fingerprint());
  });
  fsdp::agree(o.context().groups().world(), "optimizer group (pattern, hyperparameters)", f.value(),
              local);
  const int taken = o.add_group(pattern, h);
  if (group) *group = o.num_groups() - 1;
  if (nmatched) *nmatched = taken;
}

void fsdp_optimizer_get_hyperparams(fsdp::Optimizer& o, int group, fsdp_hyperparams_t* hp) {
  const int g = group_index(o, group, false);
  fsdp::capi::write_sized(hp, fsdp::capi::to_struct(o.group(g)), "hp");
}

void fsdp_optimizer_set_hyperparams(fsdp::Optimizer& o, int group, const fsdp_hyperparams_t* hp) {
  const int g = group_index(o, group, false);
  if (!hp) fail(Errc::InvalidArgument, "hp: NULL");
  o.set_hyperparams(g, read_hyperparams(hp, o.kind(), "hp"));
}

void fsdp_optimizer_set_lr(fsdp::Optimizer& o, int group, double lr) {
  const int g = group_index(o, group, true);
  if (!std::isfinite(lr) || lr < 0)
    fail(Errc::InvalidArgument, "lr = " + std::to_string(lr) + ": must be finite and >= 0");
  for (int k = 0; k < o.num_groups(); ++k) {
    if (g != -1 && k != g) continue;
    HyperParams h = o.group(k);
    h.lr = lr;
    o.set_hyperparams(k, h);
  }
}

void fsdp_optimizer_step(fsdp::Optimizer& o) {
  o.context().scheduler().quiesce();  // reductions in flight land first
  o.step();
}

void fsdp_optimizer_zero_grad(fsdp::Optimizer& o) {
  o.context().scheduler().quiesce();
  o.zero_grad();
}

void fsdp_optimizer_state(fsdp::Optimizer& o, fsdp_unit_t unit, const char* name, void** data,
                          size_t* numel) {
  const fsdp::Unit& u = optimized_unit(o, unit);
  if (!name) fail(Errc::InvalidArgument, "name: NULL");
  const std::vector<std::string> names = o.state_names();
  int b = -1;
  for (std::size_t k = 0; k < names.size(); ++k)
    if (names[k] == name) b = static_cast<int>(k);
  if (b < 0) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "'" : ", '") + n + "'";
    const bool amsgrad_off =
        o.kind() == OptimizerKind::AdamW && std::string(name) == "max_exp_avg_sq";
    fail(Errc::InvalidArgument,
         "name = '" + std::string(name) + "': " + o.label() + " keeps " + known +
             (amsgrad_off ? " (max_exp_avg_sq once a group has amsgrad)" : ""));
  }
  if (u.layout().grad_shard_numel() == 0)
    fail(Errc::InvalidArgument, "unit: " + u.label() +
                                    ": every parameter is frozen (requires_grad = 0): it has "
                                    "no optimizer state");
  u.refuse_piece_view("the optimizer state");
  if (data) {
    *data = o.ensure_state(u, b);
    o.context().before_cpu_touches_shards();  // offloaded or on a GPU: the step has landed
    o.context().shard_memory().handover_to_caller();
  }
  if (numel) *numel = u.layout().grad_shard_numel();
}

void fsdp_optimizer_steps(fsdp::Optimizer& o, fsdp_unit_t unit, int64_t* steps) {
  const fsdp::Unit& u = optimized_unit(o, unit);
  *steps = o.steps(u);
}

void fsdp_optimizer_set_steps(fsdp::Optimizer& o, fsdp_unit_t unit, int64_t steps) {
  const fsdp::Unit& u = optimized_unit(o, unit);
  if (steps < 0) fail(Errc::InvalidArgument, "steps = " + std::to_string(steps) + ": must be >= 0");
  o.set_steps(u, steps);
}

void fsdp_optimizer_param_steps(fsdp::Optimizer& o, fsdp_unit_t unit, int index, int64_t* steps) {
  const fsdp::Unit& u = optimized_unit(o, unit);
  const std::size_t i = fsdp::capi::param_index(u, index);
  *steps = o.steps(u, i);
}

void fsdp_optimizer_set_param_steps(fsdp::Optimizer& o, fsdp_unit_t unit, int index,
                                    int64_t steps) {
  const fsdp::Unit& u = optimized_unit(o, unit);
  const std::size_t i = fsdp::capi::trainable_index(u, index);
  if (steps < 0) fail(Errc::InvalidArgument, "steps = " + std::to_string(steps) + ": must be >= 0");
  o.set_steps(u, i, steps);
}

void fsdp_clip_grad_norm(fsdp::Context& c, double max_norm, double norm_type, double* total_norm) {
  if (!(max_norm > 0) || std::isinf(max_norm))
    fail(Errc::InvalidArgument,
         "max_norm = " + std::to_string(max_norm) + ": must be finite and > 0");
  if (!(norm_type >= 1))
    fail(Errc::InvalidArgument,
         "norm_type = " + std::to_string(norm_type) + ": must be >= 1 (2: L2, INFINITY: max)");
  c.scheduler().quiesce();
  const double norm = fsdp::clip_grad_norm(c, max_norm, norm_type);
  if (total_norm) *total_norm = norm;
}

void fsdp_grad_scaler_create(std::optional<fsdp::Error> local, fsdp::Context& c, double init_scale,
                             double growth_factor, double backoff_factor, int growth_interval,
                             fsdp_grad_scaler_t* scaler) {
  if (!local)
    local = fsdp::attempt([&] {
      if (!(init_scale > 0) || std::isinf(init_scale))
        fail(Errc::InvalidArgument,
             "init_scale = " + std::to_string(init_scale) + ": must be finite and > 0");
      if (!(growth_factor > 1) || std::isinf(growth_factor))
        fail(Errc::InvalidArgument,
             "growth_factor = " + std::to_string(growth_factor) + ": must be finite and > 1");
      if (!(backoff_factor > 0 && backoff_factor < 1))
        fail(Errc::InvalidArgument,
             "backoff_factor = " + std::to_string(backoff_factor) + ": must be in (0, 1)");
      if (growth_interval < 1)
        fail(Errc::InvalidArgument,
             "growth_interval = " + std::to_string(growth_interval) + ": must be >= 1");
    });
  GradScaler& s = fsdp::OptimizerRegistry::of(c).create_grad_scaler(
      init_scale, growth_factor, backoff_factor, growth_interval, local);
  fsdp::capi::register_grad_scaler(&s);
  *scaler = fsdp::capi::to_handle(&s);
}

void fsdp_grad_scaler_destroy(fsdp_grad_scaler_t* scaler) {
  GradScaler& s = grad_scaler_from(*scaler, "*scaler");
  fsdp::capi::retire(&s, fsdp::capi::Retired::Destroyed);
  fsdp::OptimizerRegistry::of(s.context()).destroy_grad_scaler(s);
  *scaler = nullptr;
}

void fsdp_grad_scaler_scale(fsdp::GradScaler& s, double* scale) {
  *scale = s.scale();
}

// The optimizer must belong to the scaler's context.
static Optimizer& scaler_optimizer(const GradScaler& s, fsdp_optimizer_t opt) {
  Optimizer& o = optimizer_from(opt, "opt");
  if (&o.context() != &s.context())
    fail(Errc::InvalidArgument, "opt: " + o.label() + " belongs to another context");
  return o;
}

void fsdp_grad_scaler_unscale(fsdp::GradScaler& s, fsdp_optimizer_t opt) {
  Optimizer& o = scaler_optimizer(s, opt);
  s.context().scheduler().quiesce();
  s.unscale(o);
}

void fsdp_grad_scaler_step(fsdp::GradScaler& s, fsdp_optimizer_t opt, int* skipped) {
  Optimizer& o = scaler_optimizer(s, opt);
  s.context().scheduler().quiesce();
  const bool skip = s.step(o);
  if (skipped) *skipped = skip ? 1 : 0;
}

void fsdp_grad_scaler_update(fsdp::GradScaler& scaler) {
  scaler.update();
}

}  // namespace fsdp::capi::body
