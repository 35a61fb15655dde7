#include "optim/grad_scaler.hpp"

#include <vector>

#include "base/error.hpp"
#include "base/mpi_check.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "optim/optimizer.hpp"

namespace fsdp {

GradScaler::GradScaler(Context& ctx, uint64_t id, double init_scale, double growth_factor,
                       double backoff_factor, int growth_interval)
    : ctx_(ctx),
      id_(id),
      scale_(init_scale),
      growth_(growth_factor),
      backoff_(backoff_factor),
      interval_(growth_interval) {}

void GradScaler::unscale(Optimizer& opt) {
  if (unscaled_)
    fail(Errc::State, label() +
                          ": gradients were already unscaled for this step (call "
                          "fsdp_grad_scaler_update after the step)");
  ctx_.before_shard_update();
  opt.check_steppable(/*for_update=*/false);  // an unreduced gradient: refused, nothing scaled
  unscale_checked(opt);
}

void GradScaler::unscale_checked(Optimizer& opt) {
  TraceSpan span(ctx_.trace(), "unscale", "", 0);
  // PyTorch multiplies by the float reciprocal of the scale.
  const double inv = static_cast<double>(static_cast<float>(1.0 / scale_));
  std::vector<Span> spans;
  for (Unit* u : opt.units()) {
    bool zero = true;
    void* g = u->grad_shard_if_any(&zero);
    if (!g || zero) continue;
    spans.push_back({g, u->layout().grad_shard_numel(), u->layout().dtype()});
    ctx_.shard_memory().kernels().scale(g, spans.back().count, spans.back().dtype, inv);
  }
  const int found = ctx_.shard_memory().kernels().all_finite(spans) ? 0 : 1;  // one readback
  int any = 0;
  mpi_check(MPI_Allreduce(&found, &any, 1, MPI_INT, MPI_MAX, ctx_.groups().world().comm),
            "MPI_Allreduce");
  found_inf_ = any != 0;
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& opt) {
  // Checked before the unscale, and also when an infinity will skip the step: a refused step
  // changes nothing, and a gradient no reduction took is an error either way.
  ctx_.before_shard_update();
  opt.check_steppable(/*for_update=*/true);
  if (!unscaled_) unscale_checked(opt);
  if (found_inf_) return true;
  opt.step();
  return false;
}

void GradScaler::update() {
  if (!unscaled_)
    fail(Errc::State, label() + ": no step since the last update (call fsdp_grad_scaler_step)");
  if (found_inf_) {
    scale_ *= backoff_;
    clean_steps_ = 0;
  } else if (++clean_steps_ == interval_) {
    scale_ *= growth_;
    clean_steps_ = 0;
  }
  unscaled_ = found_inf_ = false;
}

}  // namespace fsdp
