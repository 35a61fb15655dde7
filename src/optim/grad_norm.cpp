#include "optim/grad_norm.hpp"

#include <cmath>
#include <vector>

#include "base/mpi_check.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"

namespace fsdp {

double clip_grad_norm(Context& ctx, double max_norm, double p) {
  TraceSpan span(ctx.trace(), "clip_grad_norm", "", 0);
  const bool inf = std::isinf(p);
  Kernels& kernels = ctx.shard_memory().kernels();
  ctx.before_shard_update();
  // Each unit's gradient shard whole (its alignment padding is zero), in id order: the same
  // summation order on every rank, and one readback for all of them.
  std::vector<Span> spans;
  for (Unit* u : ctx.units()) {
    bool zero = true;
    const void* g = u->grad_shard_if_any(&zero);
    if (g && !zero) spans.push_back({g, u->layout().grad_shard_numel(), u->layout().dtype()});
  }
  double local = 0.0;
  for (const double part : kernels.norm_partials(spans, p)) {
    if (inf)
      local = (part > local || std::isnan(part)) ? part : local;
    else
      local += part;
  }
  double total = local;
  const Group& shard = ctx.groups().shard();
  if (shard.size > 1) {
    if (inf && std::isnan(local)) local = INFINITY;  // MPI_MAX need not propagate NaN
    mpi_check(MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, inf ? MPI_MAX : MPI_SUM, shard.comm),
              "MPI_Allreduce");
  }
  const double norm = inf ? total : std::pow(total, 1.0 / p);
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (Unit* u : ctx.units()) {
      bool zero = true;
      void* g = u->grad_shard_if_any(&zero);
      if (g && !zero) kernels.scale(g, u->layout().grad_shard_numel(), u->layout().dtype(), coef);
    }
  return norm;
}

}  // namespace fsdp
