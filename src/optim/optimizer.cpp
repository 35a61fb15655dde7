#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "base/fingerprint.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "optim/group_match.hpp"

namespace fsdp {
namespace {

void require(bool ok, const std::string& who, const char* field, double value, const char* rule) {
  if (!ok)
    fail(Errc::InvalidArgument,
         who + "." + field + " = " + std::to_string(value) + ": must be " + rule);
}

}  // namespace

namespace {
HyperParamField field(const char* name, double HyperParams::*member, bool sgd, bool adamw,
                      const char* since) {
  return {name, member, nullptr, sgd, adamw, since};
}
HyperParamField field(const char* name, bool HyperParams::*member, bool sgd, bool adamw,
                      const char* since) {
  return {name, nullptr, member, sgd, adamw, since};
}
}  // namespace

const std::vector<HyperParamField>& hyperparam_fields() {
  static const std::vector<HyperParamField> t = {
#define FSDP_HYPERPARAM_ROW(name, type, sgd, adamw, since) \
  field(#name, &HyperParams::name, sgd, adamw, since),
      FSDP_HYPERPARAMS(FSDP_HYPERPARAM_ROW)
#undef FSDP_HYPERPARAM_ROW
  };
  return t;
}

uint64_t HyperParams::fingerprint() const {
  Fingerprint f;
  for (const HyperParamField& h : hyperparam_fields())
    if (h.real)
      f.add_double(this->*h.real);
    else
      f.add(static_cast<uint64_t>(this->*h.flag));
  return f.value();
}

const std::vector<StateBuffer>& state_buffers(OptimizerKind kind) {
  static const std::vector<StateBuffer> sgd{{"momentum", nullptr}};
  static const std::vector<StateBuffer> adamw{
      {"exp_avg", nullptr}, {"exp_avg_sq", nullptr}, {"max_exp_avg_sq", "amsgrad"}};
  return kind == OptimizerKind::AdamW ? adamw : sgd;
}

std::vector<std::string> state_names(OptimizerKind kind, bool amsgrad) {
  std::vector<std::string> names;
  for (const StateBuffer& b : state_buffers(kind))
    if (!b.kept_when || amsgrad) names.emplace_back(b.name);  // amsgrad is the one condition
  return names;
}

void validate(const HyperParams& h, OptimizerKind kind, const std::string& who) {
  require(std::isfinite(h.lr) && h.lr >= 0, who, "lr", h.lr, "finite and >= 0");
  require(std::isfinite(h.weight_decay) && h.weight_decay >= 0, who, "weight_decay", h.weight_decay,
          "finite and >= 0");
  if (kind == OptimizerKind::Sgd) {
    require(h.momentum >= 0 && h.momentum < 1, who, "momentum", h.momentum, "in [0, 1)");
    require(h.dampening >= 0 && h.dampening <= 1, who, "dampening", h.dampening, "in [0, 1]");
    if (h.nesterov && (h.momentum <= 0 || h.dampening != 0))
      fail(Errc::InvalidArgument,
           who + ".nesterov: needs momentum > 0 and dampening = 0 (as in PyTorch)");
    if (h.amsgrad)
      fail(Errc::InvalidArgument,
           who + ".amsgrad: AdamW's option (SGD keeps no second moment); set it to 0");
  } else {
    require(h.beta1 >= 0 && h.beta1 < 1, who, "beta1", h.beta1, "in [0, 1)");
    require(h.beta2 >= 0 && h.beta2 < 1, who, "beta2", h.beta2, "in [0, 1)");
    require(std::isfinite(h.eps) && h.eps > 0, who, "eps", h.eps, "finite and > 0");
  }
}

const KindReads& kind_reads(OptimizerKind kind) {
  const auto reads = [](OptimizerKind k, bool step_count) {
    KindReads r{{}, step_count};
    for (const HyperParamField& h : hyperparam_fields())
      if (h.read_by(k)) r.hyperparams.push_back(h.name);
    return r;
  };
  static const KindReads sgd = reads(OptimizerKind::Sgd, false);
  static const KindReads adamw = reads(OptimizerKind::AdamW, true);
  return kind == OptimizerKind::AdamW ? adamw : sgd;
}

Optimizer::Optimizer(Context& ctx, uint64_t id, OptimizerKind kind, const HyperParams& defaults,
                     std::vector<Unit*> units)
    : ctx_(ctx), id_(id), kind_(kind), units_(std::move(units)) {
  groups_.push_back({"", {}});
  keep_hyperparams(0, defaults);
  states_.resize(units_.size());
  for (std::size_t k = 0; k < units_.size(); ++k) {
    states_[k].unit = units_[k];
    states_[k].steps.assign(units_[k]->layout().num_params(), 0);
    states_[k].momentum_fresh.assign(units_[k]->layout().num_params(), 1);
  }
  assign_slots();
  for (Unit* u : units_) u->add_user();
}

Optimizer::~Optimizer() {
  for (UnitState& s : states_) {
    const std::size_t bytes = s.unit->grad_shard_bytes();
    for (int b = 0; b < max_state_buffers(kind_); ++b)
      if (s.state[b]) {
        ctx_.shard_memory().deallocate(s.state[b], bytes);
        ctx_.accounting().sub(MemoryKind::OptimizerState, bytes);
      }
    s.unit->remove_user();
  }
}

int Optimizer::group_of(const std::string& name) const {
  return fsdp::group_of(
      groups_.size(), [&](std::size_t g) { return groups_[g].pattern.c_str(); }, name.c_str());
}

void Optimizer::assign_slots() {
  for (UnitState& s : states_) {
    s.slots.clear();
    const FlatLayout& l = s.unit->layout();
    for (std::size_t i = 0; i < l.num_params(); ++i) {
      if (!l.param(i).requires_grad) continue;
      const ShardSlice slice = s.unit->update_slice(i);
      if (slice.length)
        s.slots.push_back({i, slice.shard_offset, slice.length, group_of(l.param(i).name)});
    }
  }
}

int Optimizer::add_group(const std::string& pattern, const HyperParams& h) {
  validate(h, kind_, "hyperparams");
  int taken = 0;
  for (Unit* u : units_)
    for (const ParamSpec& p : u->layout().params())
      if (p.requires_grad && group_of(p.name) == 0 &&
          group_pattern_matches(pattern.c_str(), p.name.c_str()))
        ++taken;
  groups_.push_back({pattern, {}});
  keep_hyperparams(num_groups() - 1, h);
  assign_slots();
  return taken;
}

void Optimizer::set_hyperparams(int group, const HyperParams& h) {
  validate(h, kind_, "hyperparams");
  keep_hyperparams(group, h);
}

// amsgrad on in a group makes max_exp_avg_sq state for good: turned off again, the buffer is
// kept (not updated) and a later amsgrad continues from it, as PyTorch's state keeps it.
void Optimizer::keep_hyperparams(int group, const HyperParams& h) {
  groups_[static_cast<std::size_t>(group)].params = h;
  amsgrad_state_ = amsgrad_state_ || h.amsgrad;
}

int kept_state_buffers(OptimizerKind kind, bool any_momentum, bool amsgrad) {
  if (kind == OptimizerKind::AdamW) return amsgrad ? 3 : 2;
  return any_momentum ? 1 : 0;
}

int Optimizer::state_buffers() const {
  bool any_momentum = false;
  for (const Group& g : groups_) any_momentum = any_momentum || g.params.momentum != 0;
  return kept_state_buffers(kind_, any_momentum, amsgrad_state_);
}

void Optimizer::allocate_buffer(UnitState& s, int b) {
  if (s.state[b]) return;
  const std::size_t bytes = s.unit->grad_shard_bytes();
  s.state[b] = ctx_.shard_memory().allocate(bytes);
  ctx_.accounting().add(MemoryKind::OptimizerState, bytes);
  ctx_.shard_memory().zero(s.state[b], bytes);
  if (kind_ == OptimizerKind::Sgd) std::fill(s.momentum_fresh.begin(), s.momentum_fresh.end(), 1);
}

void Optimizer::allocate_state(UnitState& s) {
  for (int b = 0; b < state_buffers(); ++b) allocate_buffer(s, b);
}

void Optimizer::update(UnitState& s, void* grad, std::size_t offset, std::size_t length, int group,
                       int64_t steps, bool fresh) {
  Kernels& kernels = ctx_.shard_memory().kernels();
  const DType t = s.unit->precision().storage;
  const std::size_t at = offset * dtype_size(t);
  char* param = static_cast<char*>(s.unit->update_data()) + at;
  char* g = static_cast<char*>(grad) + at;
  char* s0 = s.state[0] ? static_cast<char*>(s.state[0]) + at : nullptr;
  char* s1 = s.state[1] ? static_cast<char*>(s.state[1]) + at : nullptr;
  char* s2 = s.state[2] ? static_cast<char*>(s.state[2]) + at : nullptr;
  const HyperParams& h = groups_[static_cast<std::size_t>(group)].params;
  if (kind_ == OptimizerKind::Sgd) {
    SgdArgs a;
    a.lr = h.lr, a.weight_decay = h.weight_decay, a.momentum = h.momentum;
    a.dampening = h.dampening, a.nesterov = h.nesterov, a.maximize = h.maximize;
    a.first_step = fresh;
    kernels.sgd_step(param, g, s0, length, t, a);
  } else {
    AdamWArgs a;
    a.lr = h.lr, a.weight_decay = h.weight_decay, a.beta1 = h.beta1, a.beta2 = h.beta2;
    a.eps = h.eps, a.amsgrad = h.amsgrad, a.maximize = h.maximize;
    // As PyTorch in Python: 1 - beta1**step, and bias_correction2**0.5, which is pow(x, 0.5), not
    // sqrt(x): glibc's pow rounds a few of these apart from the correctly rounded sqrt.
    a.bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(steps));
    a.bias_correction2_sqrt = std::pow(1.0 - std::pow(h.beta2, static_cast<double>(steps)), 0.5);
    kernels.adamw_step(param, g, s0, s1, s2, length, t, a);
  }
}

void Optimizer::step_unit(UnitState& s, void* grad) {
  allocate_state(s);
  const Unit& u = *s.unit;
  const FlatLayout& l = u.layout();
  for (std::size_t i = 0; i < l.num_params(); ++i)
    if (!u.grad_none(i)) ++s.steps[i];  // frozen parameters read None
  // Runs of adjacent slots that update alike (group, count, momentum start) become one kernel
  // call; a parameter without a gradient is left out.
  for (std::size_t k = 0; k < s.slots.size();) {
    const Slot& a = s.slots[k];
    if (u.grad_none(a.param)) {
      ++k;
      continue;
    }
    const int64_t t = s.steps[a.param];
    const uint8_t fresh = s.momentum_fresh[a.param];
    std::size_t end = a.offset + a.length, j = k + 1;
    for (; j < s.slots.size(); ++j) {
      const Slot& b = s.slots[j];
      if (b.offset != end || b.group != a.group || u.grad_none(b.param) || s.steps[b.param] != t ||
          s.momentum_fresh[b.param] != fresh)
        break;
      end += b.length;
    }
    update(s, grad, a.offset, end - a.offset, a.group, t, fresh != 0);
    k = j;
  }
  for (std::size_t i = 0; i < l.num_params(); ++i)
    if (!u.grad_none(i)) s.momentum_fresh[i] = 0;
}

void Optimizer::step() {
  // First: what prefetch gathered and nobody claimed is released (no unshard of the caller's),
  // and the caller's queued work is ordered before ours; neither changes anything it sees.
  ctx_.before_shard_update();
  check_steppable(/*for_update=*/true);  // before any update: a refused step changes nothing
  for (UnitState& s : states_) {
    bool zero = true;
    void* grad = s.unit->grad_shard_if_any(&zero);
    TraceSpan span(ctx_.trace(), "optimizer_step", s.unit->trace_name(),
                   grad && !zero ? s.unit->grad_shard_bytes() : 0);
    if (grad && !zero) {
      step_unit(s, grad);
      s.unit->gather_update_pieces();  // HFSDP: every replica's piece into the shard
    }
  }
}

void Optimizer::check_steppable(bool for_update) const {
  for (const Unit* u : units_) {
    if (for_update && u->is_unsharded())
      fail(Errc::State, label() + ": " + u->label() +
                            " is unsharded; reshard it before the step (the update would not "
                            "reach its unsharded copy)");
    if (u->grad_unreduced() && u->used_by_any_ranks())
      fail(Errc::StepBoundary,
           label() + ": " + u->label() +
               " is used by any subset of ranks and has a gradient no step boundary reduced: "
               "call fsdp_step_boundary (on every rank) before the step. Nothing was updated");
    if (for_update && u->used_by_any_ranks())
      ctx_.step_boundary().require_update(label() + ": " + u->label());
    if (u->grad_unreduced())
      fail(Errc::State,
           label() + ": " + u->label() +
               " has a gradient written through fsdp_grad_data that no reduction took: call "
               "fsdp_reduce_grads (with gradient sync on) before the step, or fsdp_zero_grads "
               "to discard it (the step would not see it)");
  }
}

void Optimizer::zero_grad() {
  for (Unit* u : units_) u->zero_grads();
}

int64_t Optimizer::steps(const Unit& unit) const {
  const UnitState& s = state_of(unit);
  return s.steps.empty() ? 0 : *std::max_element(s.steps.begin(), s.steps.end());
}

int64_t Optimizer::steps(const Unit& unit, std::size_t i) const {
  return state_of(unit).steps[i];
}

Optimizer::UnitState& Optimizer::state_of(const Unit& unit) {
  for (UnitState& s : states_)
    if (s.unit == &unit) return s;
  fail(Errc::Internal, unit.label() + " is not optimized by " + label());
}

const Optimizer::UnitState& Optimizer::state_of(const Unit& unit) const {
  return const_cast<Optimizer*>(this)->state_of(unit);
}

void* Optimizer::state(const Unit& unit, int b) const {
  return state_of(unit).state[b];
}

void* Optimizer::ensure_state(const Unit& unit, int b) {
  UnitState& s = state_of(unit);
  allocate_buffer(s, b);
  return s.state[b];
}

void Optimizer::set_steps(const Unit& unit, int64_t steps) {
  for (std::size_t i = 0; i < unit.layout().num_params(); ++i) set_steps(unit, i, steps);
}

void Optimizer::set_steps(const Unit& unit, std::size_t i, int64_t steps) {
  UnitState& s = state_of(unit);
  if (!unit.layout().param(i).requires_grad) return;  // frozen: never updated
  s.steps[i] = steps;
  s.momentum_fresh[i] = steps == 0 ? 1 : 0;
}

}  // namespace fsdp
