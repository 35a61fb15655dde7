// Dynamic loss scaling for float16 training with sharded gradients (PyTorch's ShardedGradScaler):
// the caller multiplies its loss by scale(); unscale() divides every gradient shard by it and
// looks for inf/NaN, and one all-reduce makes every rank see what any rank found, so every rank
// skips the same steps. update() backs the scale off after an overflow and grows it after
// growth_interval clean steps.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

class Context;
class Optimizer;

class GradScaler {
 public:
  GradScaler(Context& ctx, uint64_t id, double init_scale, double growth_factor,
             double backoff_factor, int growth_interval);
  uint64_t id() const { return id_; }
  std::string label() const { return "grad scaler " + std::to_string(id_); }
  Context& context() const { return ctx_; }
  double scale() const { return scale_; }

  // Collective over the world group. Throws State if already unscaled since the last update, and
  // InvalidArgument if a unit of `opt` does not compute in float16.
  void unscale(Optimizer& opt);
  // Unscales if not done yet; steps unless an inf/NaN was found. Returns whether it skipped.
  bool step(Optimizer& opt);
  // Local. Throws State if no step (or unscale) was made since the last update.
  void update();

  // For checkpoints.
  double growth_factor() const { return growth_; }
  double backoff_factor() const { return backoff_; }
  int growth_interval() const { return interval_; }
  int growth_tracker() const { return clean_steps_; }  // clean steps since the last change
  void restore(double scale, int growth_tracker) { scale_ = scale, clean_steps_ = growth_tracker; }

 private:
  // unscale's work, after the shards were made ready and the optimizer's units checked.
  void unscale_checked(Optimizer& opt);

  Context& ctx_;
  const uint64_t id_;
  double scale_;
  const double growth_, backoff_;
  const int interval_;
  int clean_steps_ = 0;
  bool unscaled_ = false, found_inf_ = false;
};

}  // namespace fsdp
