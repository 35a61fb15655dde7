#include "optim/registry.hpp"

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "base/id_order.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"

namespace fsdp {

OptimizerRegistry& OptimizerRegistry::of(Context& ctx) {
  if (ContextPart* p = ctx.part(PartSlot::Optimizers)) return static_cast<OptimizerRegistry&>(*p);
  auto r = std::unique_ptr<OptimizerRegistry>(new OptimizerRegistry(ctx));
  OptimizerRegistry& ref = *r;
  ctx.set_part(PartSlot::Optimizers, std::move(r));
  return ref;
}

OptimizerRegistry::~OptimizerRegistry() {
  optimizers_.clear();  // the order the context always used: optimizers, then scalers
  scalers_.clear();
}

Optimizer& OptimizerRegistry::create_optimizer(OptimizerKind kind, const HyperParams& defaults,
                                               std::vector<Unit*> units,
                                               const std::optional<Error>& local_error) {
  ctx_.scheduler().quiesce();
  Fingerprint f;
  if (!local_error) {
    f.add(static_cast<uint64_t>(kind));
    f.add(defaults.fingerprint());
    for (const Unit* u : units) f.add(u->id());
  }
  agree(ctx_.groups().world(), "optimizer settings (kind, hyperparameters, units)", f.value(),
        local_error);
  const uint64_t id = next_optimizer_id_++;
  auto opt = std::make_unique<Optimizer>(ctx_, id, kind, defaults, std::move(units));
  Optimizer& ref = *opt;
  optimizers_.emplace(id, std::move(opt));
  return ref;
}

void OptimizerRegistry::destroy_optimizer(Optimizer& opt) {
  optimizers_.erase(opt.id());
}

std::vector<Optimizer*> OptimizerRegistry::optimizers() const {
  return in_id_order(optimizers_);
}

GradScaler& OptimizerRegistry::create_grad_scaler(double init_scale, double growth, double backoff,
                                                  int interval,
                                                  const std::optional<Error>& local_error) {
  ctx_.scheduler().quiesce();
  Fingerprint f;
  for (double d : {init_scale, growth, backoff}) f.add_double(d);
  f.add(static_cast<uint64_t>(interval));
  agree(ctx_.groups().world(), "grad scaler settings", local_error ? 0 : f.value(), local_error);
  const uint64_t id = next_scaler_id_++;
  auto s = std::make_unique<GradScaler>(ctx_, id, init_scale, growth, backoff, interval);
  GradScaler& ref = *s;
  scalers_.emplace(id, std::move(s));
  return ref;
}

void OptimizerRegistry::destroy_grad_scaler(GradScaler& s) {
  scalers_.erase(s.id());
}

std::vector<GradScaler*> OptimizerRegistry::grad_scalers() const {
  return in_id_order(scalers_);
}

}  // namespace fsdp
