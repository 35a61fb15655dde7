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
  // Each unit's gradient shard piece by piece (core/flat_layout.hpp; its alignment padding is
  // zero), in id order: the same summation order on every rank, and one readback for all of them.
  // With HFSDP a rank holds one piece of each unit: the replicas' partials are gathered and
  // summed in piece order, so hybrid with and without HFSDP sum alike, bit for bit.
  std::vector<Span> spans;
  const std::size_t pieces =
      ctx.options().hfsdp ? static_cast<std::size_t>(ctx.groups().replicate().size) : 1;
  for (Unit* u : ctx.units()) {
    bool zero = true;
    const char* g = static_cast<const char*>(u->grad_shard_if_any(&zero));
    if (!g || zero) continue;
    const FlatLayout& l = u->layout();
    const std::size_t held = l.pieces() / l.update_pieces();
    for (std::size_t k = 0; k < held; ++k)
      spans.push_back({g + k * l.piece_numel() * l.element_size(), l.piece_numel(), l.dtype()});
  }
  std::vector<double> partials = kernels.norm_partials(spans, p);
  if (pieces > 1) {  // HFSDP: each replica holds one piece of the same units
    const Group& replicas = ctx.groups().replicate();
    std::vector<double> all(partials.size() * pieces);
    mpi_check(
        MPI_Allgather(partials.data(), static_cast<int>(partials.size()), MPI_DOUBLE, all.data(),
                      static_cast<int>(partials.size()), MPI_DOUBLE, replicas.comm),
        "MPI_Allgather");
    partials.assign(all.size(), 0.0);  // unit-major, piece-minor: hybrid's order
    for (std::size_t r = 0; r < pieces; ++r)
      for (std::size_t k = 0; k < spans.size(); ++k)
        partials[k * pieces + r] = all[r * spans.size() + k];
  }
  double local = 0.0;
  for (const double part : partials) {
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
