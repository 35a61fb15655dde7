// A context's optimizers and grad scalers, by id (creation order, the same on every rank): kept
// in the context's Optimizers slot (core/context_part.hpp), created and destroyed through here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "base/error.hpp"
#include "core/context_part.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"

namespace fsdp {

class Context;

class OptimizerRegistry final : public ContextPart {
 public:
  // The context's registry, created on first use.
  static OptimizerRegistry& of(Context& ctx);
  ~OptimizerRegistry() override;

  // Collective over the world group: kind, hyperparameters and units must agree across ranks.
  Optimizer& create_optimizer(OptimizerKind kind, const HyperParams& defaults,
                              std::vector<Unit*> units, const std::optional<Error>& local_error);
  void destroy_optimizer(Optimizer& opt);
  std::vector<Optimizer*> optimizers() const;
  // Collective over the world group: the settings must agree across ranks.
  GradScaler& create_grad_scaler(double init_scale, double growth, double backoff, int interval,
                                 const std::optional<Error>& local_error);
  void destroy_grad_scaler(GradScaler& s);
  std::vector<GradScaler*> grad_scalers() const;

 private:
  explicit OptimizerRegistry(Context& ctx) : ctx_(ctx) {}

  Context& ctx_;
  std::map<uint64_t, std::unique_ptr<Optimizer>> optimizers_;
  uint64_t next_optimizer_id_ = 0;
  std::map<uint64_t, std::unique_ptr<GradScaler>> scalers_;
  uint64_t next_scaler_id_ = 0;
};

}  // namespace fsdp
