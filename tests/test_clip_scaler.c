/* fsdp_clip_grad_norm against the norm of the full reduced gradient computed here (no sharding),
 * for L1, L2 and infinity norms, across two units, with a frozen parameter whose gradient-free
 * elements and the padding must not count, and under hybrid sharding, where replicas must not be
 * counted twice. Then the gradient scaler, for float16 and for float32 compute: unscaling divides
 * exactly (powers of two), an inf on one rank skips the step on every rank and backs the scale off,
 * clean steps grow it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { NA = 53, NB = 29, NF = 17 };

static double grad_value(int rank, int unit, size_t e) {
  uint64_t s = ((uint64_t)unit << 40) ^ ((uint64_t)rank << 20) ^ e;
  return th_uniform(&s) * 4.0;
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, int which, fsdp_dtype_t param_dtype) {
  static const int64_t a[1] = {NA}, b[1] = {NB}, f[1] = {NF};
  fsdp_param_desc_t d[2] = {{"w", 1, which ? b : a, FSDP_FLOAT32, 1},
                            {"frozen", 1, f, FSDP_FLOAT32, 0}};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param_dtype;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 2, d, NULL, &o, &u));
  return u;
}

/* Reduced (mean) gradient element e of unit `which`, as the library computes it in float. */
static void write_and_reduce(fsdp_unit_t u, int which) {
  float* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
  const size_t n = which ? NB : NA;
  for (size_t e = 0; e < n; ++e) g[e] = (float)grad_value(th_rank(), which, e);
  CHECK_OK(fsdp_reduce_grads(u));
}

static double ref_norm(int W, double p) {
  double acc = 0.0;
  for (int which = 0; which < 2; ++which)
    for (size_t e = 0; e < (which ? (size_t)NB : (size_t)NA); ++e) {
      double sum = 0.0;
      for (int r = 0; r < W; ++r) sum += (float)grad_value(r, which, e);
      const double x = fabs(sum / W);
      acc = isinf(p) ? (x > acc ? x : acc) : acc + pow(x, p);
    }
  return isinf(p) ? acc : pow(acc, 1.0 / p);
}

static void check_clip(fsdp_context_t ctx, double p, const char* label) {
  const int W = th_size();
  fsdp_unit_t u[2] = {make_unit(ctx, 0, FSDP_DTYPE_AUTO), make_unit(ctx, 1, FSDP_DTYPE_AUTO)};
  for (int k = 0; k < 2; ++k) write_and_reduce(u[k], k);
  float* before[2];
  size_t n[2];
  for (int k = 0; k < 2; ++k) {
    float* g = NULL;
    CHECK_OK(fsdp_shard_grad(u[k], (void**)&g, &n[k]));
    before[k] = malloc(n[k] * sizeof(float));
    memcpy(before[k], g, n[k] * sizeof(float));
  }
  const double want = ref_norm(W, p);
  double norm = 0.0;
  /* max_norm above the norm: unchanged. */
  CHECK_OK(fsdp_clip_grad_norm(ctx, want * 2, p, &norm));
  char msg[128];
  snprintf(msg, sizeof msg, "%s: norm %.15g, reference %.15g", label, norm, want);
  CHECK_MSG(fabs(norm - want) <= 1e-6 * want, msg); /* float32 inputs, double sums */
  int bad = 0;
  for (int k = 0; k < 2; ++k) {
    float* g = NULL;
    CHECK_OK(fsdp_shard_grad(u[k], (void**)&g, NULL));
    bad += memcmp(g, before[k], n[k] * sizeof(float)) != 0;
  }
  CHECK_MSG(bad == 0, "a norm below max_norm leaves the gradients alone");
  /* max_norm a quarter of it: every element scaled by max_norm / (norm + 1e-6). */
  const double max_norm = want / 4;
  CHECK_OK(fsdp_clip_grad_norm(ctx, max_norm, p, &norm));
  const float coef = (float)(max_norm / (norm + 1e-6));
  for (int k = 0; k < 2; ++k) {
    float* g = NULL;
    CHECK_OK(fsdp_shard_grad(u[k], (void**)&g, NULL));
    for (size_t j = 0; j < n[k]; ++j) bad += g[j] != before[k][j] * coef;
  }
  snprintf(msg, sizeof msg, "%s: gradients scaled by max_norm / (norm + 1e-6)", label);
  CHECK_MSG(bad == 0, msg);
  double after = 0.0;
  CHECK_OK(fsdp_clip_grad_norm(ctx, 1e30, p, &after));
  CHECK_MSG(fabs(after - max_norm) <= 1e-5 * max_norm, "the clipped norm is max_norm");
  for (int k = 0; k < 2; ++k) {
    free(before[k]);
    CHECK_OK(fsdp_unit_destroy(&u[k]));
  }
}

/* compute: FSDP_FLOAT16, or FSDP_DTYPE_AUTO (float32 compute, as under torch.autocast). */
static void check_scaler(fsdp_context_t ctx, fsdp_dtype_t compute) {
  fsdp_unit_t u = make_unit(ctx, 0, compute);
  fsdp_optimizer_t opt = NULL;
  fsdp_hyperparams_t h = FSDP_SGD_DEFAULTS;
  h.lr = 1.0;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &h, 1, &u, &opt));
  fsdp_grad_scaler_t sc = NULL;
  CHECK_OK(fsdp_grad_scaler_create(ctx, 1024.0, 2.0, 0.5, 2, &sc));
  int srank = 0;
  size_t shard_n = 0;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  double expected_scale = 1024.0;
  /* Steps: clean, inf on the last rank, clean, clean (growth after 2 clean steps). */
  const int inf_step = 1;
  for (int step = 0; step < 4; ++step) {
    double scale = 0.0;
    CHECK_OK(fsdp_grad_scaler_scale(sc, &scale));
    CHECK_MSG(scale == expected_scale, "the scale follows backoff and growth");
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
    void* g = NULL;
    CHECK_OK(fsdp_grad_data(u, 0, &g));
    const int inf_here = step == inf_step && th_rank() == th_size() - 1;
    if (compute == FSDP_FLOAT16) { /* scale * 1 = 0x6400 (1024) or 2048 = 0x6800 */
      const uint16_t scaled_one = scale == 1024.0 ? 0x6400 : scale == 2048.0 ? 0x6800 : 0x6000;
      for (size_t e = 0; e < NA; ++e) ((uint16_t*)g)[e] = scaled_one;
      if (inf_here) ((uint16_t*)g)[3] = 0x7c00; /* +inf */
    } else {
      for (size_t e = 0; e < NA; ++e) ((float*)g)[e] = (float)scale;
      if (inf_here) ((float*)g)[3] = INFINITY;
    }
    if (step == 1 || step == 2) { /* written, not reduced: refused, nothing scaled or stepped */
      float *gs0 = NULL, *p0 = NULL, gcopy[NA + NF + 16], pcopy[NA + NF + 16];
      size_t gn0 = 0, pn0 = 0;
      CHECK_OK(fsdp_shard_grad(u, (void**)&gs0, &gn0));
      CHECK_OK(fsdp_shard_data(u, (void**)&p0, &pn0));
      memcpy(gcopy, gs0, gn0 * sizeof(float));
      memcpy(pcopy, p0, pn0 * sizeof(float));
      int skipped = -1;
      CHECK_FAILS(fsdp_grad_scaler_step(sc, opt, &skipped), FSDP_ERR_STATE, "no reduction took");
      CHECK_FAILS(fsdp_grad_scaler_unscale(sc, opt), FSDP_ERR_STATE, "no reduction took");
      CHECK_MSG(skipped == -1, "a refused scaler step leaves its output alone");
      CHECK_MSG(memcmp(gcopy, gs0, gn0 * sizeof(float)) == 0 &&
                    memcmp(pcopy, p0, pn0 * sizeof(float)) == 0,
                "a refused scaler step changes neither the gradient shard nor the shard");
    }
    CHECK_OK(fsdp_reduce_grads(u));
    /* A shard never exceeds the whole unit plus each section's padding (under 8 + 8 elements). */
    float *shard = NULL, before[NA + NF + 16];
    CHECK_OK(fsdp_shard_data(u, (void**)&shard, &shard_n));
    CHECK(shard_n <= NA + NF + 16);
    memcpy(before, shard, shard_n * sizeof(float));
    CHECK_OK(fsdp_grad_scaler_unscale(sc, opt));
    CHECK_FAILS(fsdp_grad_scaler_unscale(sc, opt), FSDP_ERR_STATE, "already unscaled");
    float* gs = NULL;
    size_t grad_n = 0; /* the trainable block: the first grad_n elements of the shard */
    CHECK_OK(fsdp_shard_grad(u, (void**)&gs, &grad_n));
    int skipped = -1;
    CHECK_OK(fsdp_grad_scaler_step(sc, opt, &skipped));
    CHECK_MSG(skipped == (step == inf_step), "every rank skips exactly the step with an inf");
    int bad = 0;
    for (size_t j = 0; j < grad_n; ++j) {
      const size_t k = (size_t)srank * grad_n + j;
      if (step != inf_step && k < NA) bad += gs[j] != 1.0f; /* unscaled exactly */
      const float want = (step == inf_step || k >= NA) ? before[j] : before[j] - 1.0f;
      bad += shard[j] != want;
    }
    CHECK_MSG(bad == 0, "unscaled gradients are exact; a skipped step changes nothing");
    CHECK_OK(fsdp_grad_scaler_update(sc));
    expected_scale = step == inf_step ? expected_scale * 0.5
                     : step == 3      ? expected_scale * 2.0
                                      : expected_scale;
  }
  CHECK_FAILS(fsdp_grad_scaler_update(sc), FSDP_ERR_STATE, "no step");

  CHECK_FAILS(fsdp_grad_scaler_create(ctx, 0.0, 2.0, 0.5, 1, &sc), FSDP_ERR_INVALID_ARGUMENT,
              "init_scale");
  CHECK_FAILS(fsdp_grad_scaler_create(ctx, 8.0, 1.0, 0.5, 1, &sc), FSDP_ERR_INVALID_ARGUMENT,
              "growth_factor");
  CHECK_FAILS(fsdp_grad_scaler_create(ctx, 8.0, 2.0, 1.5, 1, &sc), FSDP_ERR_INVALID_ARGUMENT,
              "backoff_factor");
  CHECK_FAILS(fsdp_grad_scaler_create(ctx, 8.0, 2.0, 0.5, 0, &sc), FSDP_ERR_INVALID_ARGUMENT,
              "growth_interval");
  CHECK_OK(fsdp_grad_scaler_destroy(&sc));
  CHECK(sc == NULL);
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&u));
}

static void run(fsdp_context_t ctx) {
  check_clip(ctx, 2.0, "L2");
  check_clip(ctx, 1.0, "L1");
  check_clip(ctx, INFINITY, "inf");
  check_scaler(ctx, FSDP_FLOAT16);
  check_scaler(ctx, FSDP_DTYPE_AUTO);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_clip_scaler");
  th_run_full_and_hybrid(run); /* hybrid: replicas must not be counted twice */
  return th_finish();
}
