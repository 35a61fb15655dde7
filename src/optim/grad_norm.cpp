#include "optim/grad_norm.hpp"

#include <cmath>
#include <vector>

#include "base/mpi_check.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "memory/fixed_sum.hpp"

namespace fsdp {

namespace {

// This rank's sum, added over `g`'s ranks: integers, so the order does not matter.
__int128 sum_over(const Group& g, __int128 local) {
  if (g.size <= 1) return local;
  std::vector<__int128> all(static_cast<std::size_t>(g.size));
  mpi_check(
      MPI_Allgather(&local, sizeof local, MPI_BYTE, all.data(), sizeof local, MPI_BYTE, g.comm),
      "MPI_Allgather");
  __int128 total = 0;
  for (const __int128 x : all) total += x;
  return total;
}

// {largest |x|, 1 if any x is NaN}, the largest over `g`'s ranks (MPI_MAX need not keep NaN).
void max_over(const Group& g, double (&m)[2]) {
  if (g.size <= 1) return;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, m, 2, MPI_DOUBLE, MPI_MAX, g.comm), "MPI_Allreduce");
}

}  // namespace

double clip_grad_norm(Context& ctx, double max_norm, double p) {
  TraceSpan span(ctx.trace(), "clip_grad_norm", "", 0);
  const bool inf = std::isinf(p);
  Kernels& kernels = ctx.shard_memory().kernels();
  ctx.before_shard_update();
  // Each unit's gradient shard piece by piece (core/flat_layout.hpp; its alignment padding is
  // zero). With HFSDP a rank holds one piece of each unit and its replicas hold the others.
  std::vector<Span> spans;
  for (Unit* u : ctx.units()) {
    bool zero = true;
    const char* g = static_cast<const char*>(u->grad_shard_if_any(&zero));
    if (!g || zero) continue;
    const FlatLayout& l = u->layout();
    const std::size_t held = l.pieces() / l.update_pieces();
    for (std::size_t k = 0; k < held; ++k)
      spans.push_back({g + k * l.piece_numel() * l.element_size(), l.piece_numel(), l.dtype()});
  }
  // The ranks whose shards together hold every gradient element once: the shard group, and with
  // HFSDP its replicas too (hybrid's replicas hold the same gradients: counted once).
  const Group& shard = ctx.groups().shard();
  const bool hfsdp = ctx.options().hfsdp;
  // Pass 1: the largest |x| anywhere (exact in any order), and whether any x is NaN.
  const double mine = kernels.largest_abs(spans);
  double largest[2] = {std::isnan(mine) ? 0.0 : mine, std::isnan(mine) ? 1.0 : 0.0};
  max_over(shard, largest);
  if (hfsdp) max_over(ctx.groups().replicate(), largest);
  if (largest[1] != 0.0) return NAN;  // a NaN gradient: the norm is NaN, nothing is clipped
  // Pass 2 (finite p): the sum of |x|^p in fixed point scaled from a bound on the largest term
  // (memory/fixed_sum.hpp): integers, added exactly, so the norm is the same bits for any number
  // of ranks and any sharding of the same gradients.
  double total = largest[0];
  if (!inf) {
    const double bound = fixed::norm_term(largest[0], p);  // the largest term, within an ulp
    if (!std::isfinite(bound)) return INFINITY;  // an infinite gradient, or |x|^p overflows
    total = 0.0;
    if (bound > 0.0) {
      int exponent = 0;
      std::frexp(bound, &exponent);  // bound < 2^exponent
      ++exponent;                    // room for a term an ulp above the bound
      __int128 sum = kernels.norm_fixed_sum(spans, p, fixed::scale_for(exponent));
      sum = sum_over(shard, sum);
      if (hfsdp) sum = sum_over(ctx.groups().replicate(), sum);
      total = std::ldexp(static_cast<double>(sum), exponent - fixed::kTop);
    }
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
