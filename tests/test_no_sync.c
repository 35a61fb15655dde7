/* Gradient accumulation, both kinds, against a non-sharded reference: with communication
 * (reduce every micro-batch, accumulated in the gradient shard) and without (gradient sync off:
 * the full gradient is kept and added to, and only the last micro-batch communicates), for the
 * whole context and for one unit beside another that communicates. Integer
 * gradients make every sum exact, so both must equal the reference bit for bit. While sync is
 * off, reduce_grads keeps the full gradient (it is local). A unit's own divide factor
 * (fsdp_unit_set_grad_divide_factor) replaces the division by W. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

#define N 211
#define MICRO 3

static float grad(int rank, size_t e, int micro) {
  return (float)((int)((rank + 2) * (int)(e % 11 + 1) + micro * 5) % 19 - 9);
}

static fsdp_unit_t make_unit(fsdp_context_t ctx) {
  static const int64_t shape[1] = {N};
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, &u));
  return u;
}

static void add_grad(fsdp_unit_t u, int micro) {
  float* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
  for (size_t e = 0; e < N; ++e) g[e] += grad(th_rank(), e, micro);
}

/* u's gradient shard, its length and this rank's place in the shard group. */
static float* grad_shard(fsdp_context_t ctx, fsdp_unit_t u, int* srank, size_t* shard_n) {
  float* gs = NULL;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, srank, NULL));
  CHECK_OK(fsdp_shard_grad(u, (void**)&gs, shard_n));
  return gs;
}

static int mismatches(fsdp_context_t ctx, fsdp_unit_t u, int per_micro_division) {
  const int W = th_size();
  int srank = 0;
  size_t shard_n = 0;
  const float* gs = grad_shard(ctx, u, &srank, &shard_n);
  int bad = 0;
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t e = (size_t)srank * shard_n + j;
    float want = 0.0f, total = 0.0f;
    for (int m = 0; m < MICRO && e < N; ++m) {
      float sum = 0.0f;
      for (int r = 0; r < W; ++r) sum += grad(r, e, m);
      want += sum / (float)W;
      total += sum;
    }
    if (!per_micro_division) want = total / (float)W;
    bad += gs[j] != want;
  }
  return bad;
}

/* Elements of u's gradient shard that differ from (sum over ranks of micro-batch 0) / divisor. */
static int divided_mismatches(fsdp_context_t ctx, fsdp_unit_t u, float divisor) {
  int srank = 0;
  size_t shard_n = 0;
  const float* gs = grad_shard(ctx, u, &srank, &shard_n);
  int bad = 0;
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t e = (size_t)srank * shard_n + j;
    float sum = 0.0f;
    for (int r = 0; r < th_size() && e < N; ++r) sum += grad(r, e, 0);
    bad += gs[j] != sum / divisor;
  }
  return bad;
}

/* fsdp_unit_set_grad_divide_factor (FSDP2's set_gradient_divide_factor): 1 gives the sum, 3 the
 * sum / 3, 0 the context's mean again; a bad factor is refused and changes nothing. */
static void check_divide_factor(fsdp_context_t ctx) {
  const float W = (float)th_size();
  const double factors[3] = {1.0, 3.0, 0.0};
  const float divisors[3] = {1.0f, 3.0f, W};
  for (int k = 0; k < 3; ++k) {
    fsdp_unit_t u = make_unit(ctx);
    CHECK_OK(fsdp_unit_set_grad_divide_factor(u, 7.0));
    CHECK_OK(fsdp_unit_set_grad_divide_factor(u, factors[k]));
    CHECK_FAILS(fsdp_unit_set_grad_divide_factor(u, -1.0), FSDP_ERR_INVALID_ARGUMENT, "factor");
    CHECK_FAILS(fsdp_unit_set_grad_divide_factor(u, NAN), FSDP_ERR_INVALID_ARGUMENT, "factor");
    CHECK_FAILS(fsdp_unit_set_grad_divide_factor(u, INFINITY), FSDP_ERR_INVALID_ARGUMENT, "factor");
    add_grad(u, 0);
    CHECK_OK(fsdp_reduce_grads(u));
    CHECK_MSG(divided_mismatches(ctx, u, divisors[k]) == 0,
              "fsdp_unit_set_grad_divide_factor: the sum over ranks / factor");
    CHECK_OK(fsdp_unit_destroy(&u));
  }
  CHECK_FAILS(fsdp_unit_set_grad_divide_factor(NULL, 1.0), FSDP_ERR_INVALID_HANDLE, "unit");
}

/* bfloat16 compute, float32 reduction, gradient sync off for all but the last of 16 micro-batches:
 * the micro-batches accumulate in float32 (reduce_dtype), as FSDP2's do, not in bfloat16. The
 * caller adds each micro-batch into the bfloat16 buffer fsdp_grad_data gives (as autograd adds
 * into p.grad). Every value is a bfloat16 near 1 and every sum fits float32 exactly, so the
 * reference is exact; accumulating in bfloat16 would be off by up to its rounding at 16 (0.4%). */
#define LOW_MICRO 16
static float low_grad(int rank, size_t e, int micro) {
  return 1.0f + (float)((e * 7 + (size_t)micro * 3 + (size_t)rank) % 13) / 64.0f;
}

static void check_wide_accumulation(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.param_dtype = FSDP_BFLOAT16;
  cfg.reduce_dtype = FSDP_FLOAT32;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  fsdp_unit_t u = make_unit(ctx);
  float add[N], have[N];
  CHECK_OK(fsdp_set_grad_sync(ctx, 0));
  for (int k = 0; k < LOW_MICRO; ++k) {
    if (k == LOW_MICRO - 1) CHECK_OK(fsdp_set_grad_sync(ctx, 1));
    void* g = NULL;
    CHECK_OK(fsdp_grad_data(u, 0, &g));
    CHECK_OK(fsdp_convert(have, FSDP_FLOAT32, g, FSDP_BFLOAT16, N));
    for (size_t e = 0; e < N; ++e) add[e] = have[e] + low_grad(th_rank(), e, k);
    CHECK_OK(fsdp_convert(g, FSDP_BFLOAT16, add, FSDP_FLOAT32, N));
    CHECK_OK(fsdp_reduce_grads(u));
  }
  int srank = 0, bad = 0;
  size_t shard_n = 0;
  float* gs = NULL;
  double worst = 0.0;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  CHECK_OK(fsdp_shard_grad(u, (void**)&gs, &shard_n));
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t e = (size_t)srank * shard_n + j;
    double want = 0.0;
    for (int r = 0; r < th_size() && e < N; ++r)
      for (int k = 0; k < LOW_MICRO; ++k) want += low_grad(r, e, k);
    want /= th_size();
    const double err = want ? fabs(gs[j] - want) / want : fabs(gs[j]);
    if (err > worst) worst = err;
    bad += err > 1e-6;
  }
  char msg[160];
  snprintf(msg, sizeof msg,
           "no_sync, bfloat16 compute, float32 reduction: micro-batches accumulate "
           "in float32 (largest relative error %.2e)",
           worst);
  CHECK_MSG(bad == 0, msg);
  /* Zeroing discards the accumulated sum too. */
  CHECK_OK(fsdp_set_grad_sync(ctx, 0));
  void* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, &g));
  CHECK_OK(fsdp_convert(g, FSDP_BFLOAT16, add, FSDP_FLOAT32, N));
  CHECK_OK(fsdp_reduce_grads(u));
  CHECK_OK(fsdp_zero_grads(u));
  CHECK_OK(fsdp_set_grad_sync(ctx, 1));
  CHECK_FAILS(fsdp_reduce_grads(u), FSDP_ERR_STATE, "no gradient");
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK_MSG(m.full_grad_bytes == 0, "zeroing releases the accumulated sum");
  CHECK_OK(fsdp_unit_destroy(&u));
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_no_sync");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));

  /* With communication: every micro-batch reduced. */
  fsdp_unit_t a = make_unit(ctx);
  for (int m = 0; m < MICRO; ++m) {
    add_grad(a, m);
    CHECK_OK(fsdp_reduce_grads(a));
  }
  CHECK_MSG(mismatches(ctx, a, 1) == 0, "accumulation with communication");

  /* Without: sync off for all but the last micro-batch. */
  fsdp_unit_t b = make_unit(ctx);
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  size_t padded = 0;
  CHECK_OK(fsdp_unit_numel(b, NULL, &padded, NULL));
  CHECK_OK(fsdp_set_grad_sync(ctx, 0));
  for (int k = 0; k < MICRO; ++k) {
    if (k == MICRO - 1) CHECK_OK(fsdp_set_grad_sync(ctx, 1));
    add_grad(b, k);
    CHECK_OK(fsdp_reduce_grads(b));
    CHECK_OK(fsdp_memory_stats(ctx, &m));
    if (k < MICRO - 1)
      CHECK_MSG(m.full_grad_bytes >= padded * sizeof(float), "no_sync keeps the full gradient");
    else
      CHECK_MSG(m.full_grad_bytes == 0, "the synchronizing reduce releases it");
  }
  CHECK_MSG(mismatches(ctx, b, 0) == 0, "accumulation without communication (no_sync)");

  /* Per unit (fsdp_unit_set_grad_sync, FSDP2's per-module switch): c accumulates locally for
   * all but the last micro-batch while d, beside it, communicates every one. */
  fsdp_unit_t c = make_unit(ctx), d = make_unit(ctx);
  int on = -1;
  for (int k = 0; k < MICRO; ++k) {
    CHECK_OK(fsdp_unit_set_grad_sync(c, k == MICRO - 1));
    CHECK_OK(fsdp_unit_grad_sync(c, &on));
    CHECK_MSG(on == (k == MICRO - 1), "fsdp_unit_grad_sync: the unit's own setting");
    CHECK_OK(fsdp_unit_grad_sync(d, &on));
    CHECK_MSG(on == 1, "fsdp_unit_grad_sync: another unit keeps communicating");
    add_grad(c, k);
    add_grad(d, k);
    CHECK_OK(fsdp_reduce_grads(c));
    CHECK_OK(fsdp_reduce_grads(d));
  }
  CHECK_MSG(mismatches(ctx, c, 0) == 0, "per-unit sync off: accumulated without communication");
  CHECK_MSG(mismatches(ctx, d, 1) == 0, "the other unit: reduced every micro-batch");
  CHECK_OK(fsdp_set_grad_sync(ctx, 0));
  CHECK_OK(fsdp_unit_grad_sync(d, &on));
  CHECK_MSG(on == 0, "fsdp_unit_grad_sync: off while the context's is off");
  CHECK_OK(fsdp_set_grad_sync(ctx, 1));
  CHECK_FAILS(fsdp_unit_set_grad_sync(c, 2), FSDP_ERR_INVALID_ARGUMENT, "enabled");
  CHECK_FAILS(fsdp_unit_set_grad_sync(NULL, 1), FSDP_ERR_INVALID_HANDLE, "unit");
  CHECK_FAILS(fsdp_unit_grad_sync(c, NULL), FSDP_ERR_INVALID_ARGUMENT, "enabled");
  CHECK_OK(fsdp_unit_grad_sync(c, &on));
  CHECK_MSG(on == 1, "a refused switch changes nothing");
  CHECK_OK(fsdp_unit_destroy(&c));
  CHECK_OK(fsdp_unit_destroy(&d));

  check_divide_factor(ctx);

  CHECK_FAILS(fsdp_set_grad_sync(ctx, 2), FSDP_ERR_INVALID_ARGUMENT, "enabled");
  CHECK_FAILS(fsdp_set_grad_sync(NULL, 1), FSDP_ERR_INVALID_HANDLE, "ctx");
  CHECK_OK(fsdp_unit_destroy(&a));
  CHECK_OK(fsdp_unit_destroy(&b));
  CHECK_OK(fsdp_finalize(&ctx));
  check_wide_accumulation();
  return th_finish();
}
