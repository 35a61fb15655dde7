/* Gradient norms are the same bits on any number of ranks. One job of W ranks makes contexts over
 * its first 1, 2, ..., W ranks (full sharding), and at 4 ranks also hybrid (F = 2), HFSDP and no
 * sharding; each holds the same gradients (three units of uneven sizes, float32 and float64, so
 * the shards split them differently every time: the first rank writes them, the others zeros, and
 * the reduction sums). fsdp_clip_grad_norm's L1, L2, L3 and infinity norms must be bitwise equal
 * across all of them, and within the fixed-point bound of the exact value, computed here with
 * Shewchuk's exact summation (the algorithm of Python's math.fsum), rounded once. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { NUNITS = 3, NP = 4 };
static const int64_t kSizes[NUNITS] = {4099, 1531, 257}; /* primes: uneven shards everywhere */
static const fsdp_dtype_t kTypes[NUNITS] = {FSDP_FLOAT32, FSDP_FLOAT64, FSDP_FLOAT32};
static const double kNormTypes[NP] = {1.0, 2.0, 3.0, INFINITY};

/* Gradient element e of unit u: signed values over twelve orders of magnitude, so that a sum's
 * order changes its rounding. */
static double grad_value(int u, int64_t e) {
  uint64_t s = ((uint64_t)(u + 1) << 40) ^ (uint64_t)e * 0x9e3779b97f4a7c15ull;
  const double m = th_uniform(&s) * 2.0 - 1.0, k = floor(th_uniform(&s) * 12.0) - 6.0;
  const double x = m * pow(10.0, k);
  return kTypes[u] == FSDP_FLOAT32 ? (double)(float)x : x;
}

/* Shewchuk's exact sum of doubles: non-overlapping partials, then their correctly rounded sum. */
static double exact_sum(const double* x, size_t n) {
  double* partials = malloc((n + 1) * sizeof *partials);
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    double v = x[i];
    size_t k = 0;
    for (size_t j = 0; j < count; ++j) {
      double y = partials[j];
      if (fabs(v) < fabs(y)) {
        const double t = v;
        v = y, y = t;
      }
      const double hi = v + y, lo = y - (hi - v);
      if (lo != 0.0) partials[k++] = lo;
      v = hi;
    }
    partials[k++] = v;
    count = k;
  }
  /* Round the partials' sum once (fsum's final loop, with its half-way correction). */
  double hi = 0.0;
  if (count > 0) {
    size_t j = count - 1;
    hi = partials[j];
    double lo = 0.0;
    while (j > 0) {
      const double v = hi, y = partials[--j];
      hi = v + y;
      const double yr = hi - v;
      lo = y - yr;
      if (lo != 0.0) break;
    }
    if (j > 0 && ((lo < 0.0 && partials[j - 1] < 0.0) || (lo > 0.0 && partials[j - 1] > 0.0))) {
      const double y = lo * 2.0, v = hi + y, yr = v - hi;
      if (y == yr) hi = v;
    }
  }
  free(partials);
  return hi;
}

/* The reference norm of every unit's gradient, and the element count. */
static double reference(double p, size_t* count) {
  size_t n = 0;
  for (int u = 0; u < NUNITS; ++u) n += (size_t)kSizes[u];
  double* terms = malloc(n * sizeof *terms);
  double largest = 0.0;
  size_t k = 0;
  for (int u = 0; u < NUNITS; ++u)
    for (int64_t e = 0; e < kSizes[u]; ++e) {
      const double a = fabs(grad_value(u, e));
      largest = a > largest ? a : largest;
      terms[k++] = p == 2.0 ? a * a : p == 1.0 ? a : pow(a, p);
    }
  const double sum = exact_sum(terms, n);
  free(terms);
  *count = n;
  return isinf(p) ? largest : pow(sum, 1.0 / p);
}

/* The four norms of the same gradients in a context over `comm` (every rank of it calls). */
static void norms_over(MPI_Comm comm, fsdp_sharding_strategy_t strategy, int factor, int hfsdp,
                       double out[NP]) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = strategy;
  cfg.sharding_factor = factor;
  cfg.hfsdp = hfsdp;
  cfg.grad_reduction = FSDP_REDUCE_SUM;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(comm, &cfg, &ctx));
  if (!ctx) return;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  fsdp_unit_t units[NUNITS];
  for (int u = 0; u < NUNITS; ++u) {
    fsdp_param_desc_t d = {"w", 1, &kSizes[u], kTypes[u], 1};
    CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, &units[u]));
    CHECK_OK(fsdp_unshard(units[u]));
    void* g = NULL;
    CHECK_OK(fsdp_grad_data(units[u], 0, &g));
    for (int64_t e = 0; e < kSizes[u]; ++e) {
      const double v = rank == 0 ? grad_value(u, e) : 0.0; /* x + 0 + ... + 0 = x, exactly */
      if (kTypes[u] == FSDP_FLOAT32)
        ((float*)g)[e] = (float)v;
      else
        ((double*)g)[e] = v;
    }
    CHECK_OK(fsdp_reduce_grads(units[u]));
    CHECK_OK(fsdp_reshard(units[u]));
  }
  for (int k = 0; k < NP; ++k) CHECK_OK(fsdp_clip_grad_norm(ctx, 1e300, kNormTypes[k], &out[k]));
  for (int u = 0; u < NUNITS; ++u) CHECK_OK(fsdp_unit_destroy(&units[u]));
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_norm_rank_counts");
  const int W = th_size(), me = th_rank();
  double want[NP];
  size_t n = 0;
  for (int k = 0; k < NP; ++k) want[k] = reference(kNormTypes[k], &n);
  char msg[256];
  double first[NP] = {0};
  for (int layout = 0; layout < W + 3; ++layout) {
    /* Layouts 0..W-1: full sharding over ranks 0..layout; then, at 4 ranks, hybrid, HFSDP and
     * no sharding over all four. */
    const int extra = layout >= W;
    if (extra && W != 4) break;
    const int size = extra ? W : layout + 1;
    /* The node shared-memory transport needs as many ranks of a context on each node: with
     * emulated nodes (FSDP_RANKS_PER_NODE) a context over part of one is left out. */
    const int per_node = th_ranks_per_node();
    if (size > per_node && size % per_node != 0) continue;
    const fsdp_sharding_strategy_t strategy = layout == W + 2 ? FSDP_NO_SHARD
                                              : extra         ? FSDP_HYBRID_SHARD
                                                              : FSDP_FULL_SHARD;
    const char* label = layout == W       ? "hybrid"
                        : layout == W + 1 ? "HFSDP"
                        : layout == W + 2 ? "no sharding"
                                          : "full sharding";
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, me < size ? 0 : MPI_UNDEFINED, me, &comm);
    double got[NP] = {0};
    if (comm != MPI_COMM_NULL) {
      norms_over(comm, strategy, extra && strategy == FSDP_HYBRID_SHARD ? 2 : 0, layout == W + 1,
                 got);
      MPI_Comm_free(&comm);
    }
    if (me != 0) continue; /* rank 0 is in every context */
    for (int k = 0; k < NP; ++k) {
      if (layout == 0) first[k] = got[k];
      snprintf(msg, sizeof msg, "%s over %d rank(s), p = %g: norm %a, over 1 rank %a", label, size,
               kNormTypes[k], got[k], first[k]);
      CHECK_MSG(memcmp(&got[k], &first[k], sizeof got[k]) == 0, msg);
      /* The fixed-point bound (memory/fixed_sum.hpp): the p-th power within n * 2^-69 of the
       * exact sum, relative; the root within as much plus two roundings. The maximum is exact. */
      const double tol = isinf(kNormTypes[k]) ? 0.0 : (double)n * ldexp(1.0, -69) + 4e-16;
      snprintf(msg, sizeof msg, "%s over %d rank(s), p = %g: norm %.17g, exact %.17g", label, size,
               kNormTypes[k], got[k], want[k]);
      CHECK_MSG(fabs(got[k] - want[k]) <= tol * want[k], msg);
    }
  }
  if (me == 0)
    printf("norms over 1..%d ranks%s: the same bits\n", W, W == 4 ? " and 3 layouts" : "");
  return th_finish();
}
