/* Sharded SGD and AdamW against a non-sharded reference written here from PyTorch's update rules
 * (same operation order, float32): after several steps every rank's shard equals its slice of the
 * reference parameters bit for bit. Gradients are multiples of 1/8 below 2^10, so the reduced mean
 * gradient is exact and identical in both. Hyperparameter groups by name pattern (no weight decay
 * and another learning rate on biases and norms), a frozen parameter (no state, never changes),
 * a learning-rate change mid-run, and units skipped when their gradient was zeroed. Maximize for
 * both kinds and AdamW's AMSGrad (its max_exp_avg_sq state too), and the flags' argument checks
 * and defaults for a caller's struct from before they existed. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref_optim.h"

enum { NP = 4 };
static const int64_t SIZES[NP] = {37, 11, 7, 23};
static const char* NAMES[NP] = {"l0.weight", "l0.bias", "norm.weight", "frozen.w"};
static const int TRAINABLE[NP] = {1, 1, 1, 0};

static float init_value(int p, size_t e) {
  uint64_t s = ((uint64_t)p << 32) ^ e ^ 0x0babull;
  return (float)th_uniform(&s);
}

static float grad_value(int rank, int p, size_t e, int step) {
  return (float)((int)((rank + 1) * 7 + p * 3 + (int)e * 5 + step * 11) % 64 - 32) / 8.0f;
}

typedef struct {
  float lr, wd, momentum, dampening, beta1, beta2, eps;
  int nesterov, amsgrad, maximize;
} hp_t;

typedef struct {
  float p[NP][64], buf[NP][64], m[NP][64], v[NP][64], vmax[NP][64];
  int t;
} ref_t;

static hp_t group_of(int p, const hp_t* dflt, const hp_t* nodecay) {
  return (p == 1 || p == 2) ? *nodecay : *dflt; /* "*.bias" and "norm.*" */
}

static void ref_sgd(ref_t* r, int p, const float* g, hp_t h) {
  ref_sgd_step_flags(r->p[p], r->buf[p], g, (size_t)SIZES[p], r->t == 1, h.lr, h.wd, h.momentum,
                     h.dampening, h.nesterov, h.maximize);
}

static void ref_adamw(ref_t* r, int p, const float* g, hp_t h, double lr_d, double b1, double b2) {
  ref_adamw_step_flags(r->p[p], r->m[p], r->v[p], r->vmax[p], g, (size_t)SIZES[p], r->t, lr_d,
                       (double)h.wd, b1, b2, h.eps, h.amsgrad, h.maximize);
}

static fsdp_unit_t make_unit(fsdp_context_t ctx) {
  return th_unit_1d(ctx, NP, NAMES, SIZES, TRAINABLE, init_value);
}

/* State buffer `name` of the trainable parameters against the reference's `want`. */
static int compare_state(fsdp_optimizer_t opt, fsdp_unit_t u, const char* name, float (*want)[64]) {
  float* state = NULL;
  CHECK_OK(fsdp_optimizer_state(opt, u, name, (void**)&state, NULL));
  int bad = 0;
  for (int i = 0; i < NP && state; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    for (size_t k = 0; TRAINABLE[i] && k < len; ++k)
      if (state[so + k] != want[i][po + k] && bad++ < 3)
        fprintf(stderr, "rank %d %s of %s[%zu]: %.9g want %.9g\n", th_rank(), name, NAMES[i],
                po + k, state[so + k], want[i][po + k]);
  }
  return bad;
}

static int compare_shard(fsdp_unit_t u, const ref_t* r) {
  float* shard = NULL;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, NULL));
  int bad = 0;
  for (int i = 0; i < NP; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    for (size_t k = 0; k < len; ++k) {
      const float want = TRAINABLE[i] ? r->p[i][po + k] : init_value(i, po + k);
      if (shard[so + k] != want && bad++ < 3)
        fprintf(stderr, "rank %d %s[%zu]: %.9g want %.9g\n", th_rank(), NAMES[i], po + k,
                shard[so + k], want);
    }
  }
  return bad;
}

static void run_optimizer(fsdp_context_t ctx, fsdp_optimizer_kind_t kind, hp_t dflt, hp_t nodecay,
                          const char* label) {
  const int W = th_size(), steps = 5;
  fsdp_unit_t u = make_unit(ctx);
  fsdp_hyperparams_t h = kind == FSDP_OPTIMIZER_SGD ? (fsdp_hyperparams_t)FSDP_SGD_DEFAULTS
                                                    : (fsdp_hyperparams_t)FSDP_ADAMW_DEFAULTS;
  h.lr = dflt.lr, h.weight_decay = dflt.wd, h.momentum = dflt.momentum;
  h.dampening = dflt.dampening, h.nesterov = dflt.nesterov;
  h.beta1 = dflt.beta1, h.beta2 = dflt.beta2, h.eps = dflt.eps;
  h.amsgrad = dflt.amsgrad, h.maximize = dflt.maximize;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, kind, &h, 1, &u, &opt));
  fsdp_hyperparams_t nd = h;
  nd.weight_decay = nodecay.wd, nd.lr = nodecay.lr;
  int group = -1, matched = -1;
  CHECK_OK(fsdp_optimizer_add_group(opt, "*.bias", &nd, &group, &matched));
  CHECK(group == 1 && matched == 1);
  CHECK_OK(fsdp_optimizer_add_group(opt, "norm.*", &nd, &group, &matched));
  CHECK(group == 2 && matched == 1);
  CHECK_OK(fsdp_optimizer_add_group(opt, "*.weight", &nd, &group, &matched));
  CHECK_MSG(matched == 1, "a parameter belongs to the first group that matches it");
  CHECK_OK(fsdp_optimizer_set_hyperparams(opt, 3, &h)); /* l0.weight keeps the defaults */

  ref_t ref;
  memset(&ref, 0, sizeof ref);
  for (int i = 0; i < NP; ++i)
    for (int64_t e = 0; e < SIZES[i]; ++e) ref.p[i][e] = init_value(i, (size_t)e);
  for (int step = 0; step < steps; ++step) {
    if (step == 3) { /* a schedule: every group's lr halves */
      CHECK_OK(fsdp_optimizer_set_lr(opt, -1, dflt.lr / 2));
      dflt.lr /= 2, nodecay.lr = dflt.lr;
    }
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
    for (int i = 0; i < NP; ++i) {
      if (!TRAINABLE[i]) continue;
      float* g = NULL;
      CHECK_OK(fsdp_grad_data(u, i, (void**)&g));
      for (int64_t e = 0; e < SIZES[i]; ++e) g[e] = grad_value(th_rank(), i, (size_t)e, step);
    }
    CHECK_OK(fsdp_reduce_grads(u));
    CHECK_OK(fsdp_optimizer_step(opt));
    ++ref.t;
    for (int i = 0; i < NP; ++i) {
      if (!TRAINABLE[i]) continue;
      float g[64];
      for (int64_t e = 0; e < SIZES[i]; ++e) {
        float sum = 0.0f;
        for (int r = 0; r < W; ++r) sum += grad_value(r, i, (size_t)e, step);
        g[e] = sum / (float)W;
      }
      hp_t gh = group_of(i, &dflt, &nodecay);
      if (kind == FSDP_OPTIMIZER_SGD)
        ref_sgd(&ref, i, g, gh);
      else
        ref_adamw(&ref, i, g, gh, (double)gh.lr, (double)dflt.beta1, (double)dflt.beta2);
    }
  }
  char msg[128];
  snprintf(msg, sizeof msg, "%s: shards equal the non-sharded reference after %d steps", label,
           steps);
  CHECK_MSG(compare_shard(u, &ref) == 0, msg);

  fsdp_hyperparams_t got = FSDP_SGD_DEFAULTS;
  CHECK_OK(fsdp_optimizer_get_hyperparams(opt, 1, &got));
  CHECK_MSG(got.amsgrad == dflt.amsgrad && got.maximize == dflt.maximize,
            "get_hyperparams gives the group's amsgrad and maximize");
  if (kind == FSDP_OPTIMIZER_ADAMW) {
    snprintf(msg, sizeof msg, "%s: exp_avg and exp_avg_sq equal the reference's", label);
    CHECK_MSG(
        compare_state(opt, u, "exp_avg", ref.m) + compare_state(opt, u, "exp_avg_sq", ref.v) == 0,
        msg);
    if (dflt.amsgrad) {
      int below = 0; /* the test means something only where the maximum is not exp_avg_sq */
      for (int i = 0; i < NP; ++i)
        for (int64_t e = 0; TRAINABLE[i] && e < SIZES[i]; ++e)
          below += ref.v[i][e] < ref.vmax[i][e];
      CHECK_MSG(below > 0, "AMSGrad's maximum differs from exp_avg_sq somewhere");
      snprintf(msg, sizeof msg, "%s: max_exp_avg_sq equals the reference's", label);
      CHECK_MSG(compare_state(opt, u, "max_exp_avg_sq", ref.vmax) == 0, msg);
    } else {
      CHECK_FAILS(fsdp_optimizer_state(opt, u, "max_exp_avg_sq", NULL, NULL),
                  FSDP_ERR_INVALID_ARGUMENT, "amsgrad");
    }
  } else if (dflt.momentum != 0.0f) {
    snprintf(msg, sizeof msg, "%s: the momentum buffer equals the reference's", label);
    CHECK_MSG(compare_state(opt, u, "momentum", ref.buf) == 0, msg);
  }

  /* State: one (SGD momentum), two (AdamW) or three (AMSGrad) buffers of the trainable shard,
   * none for frozen. */
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  size_t grad_n = 0;
  CHECK_OK(fsdp_shard_grad(u, NULL, &grad_n));
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  const size_t buffers =
      kind == FSDP_OPTIMIZER_ADAMW ? (dflt.amsgrad ? 3 : 2) : (dflt.momentum != 0.0f ? 1 : 0);
  CHECK_MSG(m.optimizer_state_bytes == buffers * grad_n * sizeof(float),
            "optimizer state covers the trainable section of the shard");

  /* A zeroed gradient means no gradient: the step changes nothing. */
  float before[256];
  float* shard = NULL;
  size_t shard_n = 0;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, &shard_n));
  memcpy(before, shard, shard_n * sizeof(float));
  CHECK_OK(fsdp_optimizer_zero_grad(opt));
  CHECK_OK(fsdp_optimizer_step(opt));
  CHECK_MSG(memcmp(before, shard, shard_n * sizeof(float)) == 0,
            "a unit without a gradient is skipped");

  /* Misuse: step while unsharded changes nothing; the unit cannot go while the optimizer lives. */
  CHECK_OK(fsdp_unshard(u));
  CHECK_FAILS(fsdp_optimizer_step(opt), FSDP_ERR_STATE, "unsharded");
  CHECK_OK(fsdp_reshard(u));
  CHECK_FAILS(fsdp_unit_destroy(&u), FSDP_ERR_STATE, "optimizer");
  CHECK(u != NULL);
  CHECK_FAILS(fsdp_optimizer_set_lr(opt, 9, 0.1), FSDP_ERR_OUT_OF_RANGE, "group");
  CHECK_FAILS(fsdp_optimizer_set_lr(opt, 0, -1.0), FSDP_ERR_INVALID_ARGUMENT, "lr");
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK(opt == NULL);
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.optimizer_state_bytes == 0);
  CHECK_OK(fsdp_unit_destroy(&u));
}

static void check_bad_input(fsdp_context_t ctx) {
  fsdp_unit_t u = make_unit(ctx);
  fsdp_optimizer_t opt = NULL;
  fsdp_unit_t two[2] = {u, u};
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, NULL, 0, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "nunits");
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, NULL, 2, two, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "twice");
  CHECK_FAILS(fsdp_optimizer_create(ctx, (fsdp_optimizer_kind_t)5, NULL, 1, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "kind");
  fsdp_hyperparams_t h = FSDP_SGD_DEFAULTS;
  h.nesterov = 1; /* without momentum */
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &h, 1, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "nesterov");
  fsdp_hyperparams_t a = FSDP_ADAMW_DEFAULTS;
  a.beta2 = 1.0;
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &a, 1, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "beta2");
  /* The flags are 0 or 1; SGD has no AMSGrad. */
  a = (fsdp_hyperparams_t)FSDP_ADAMW_DEFAULTS;
  a.amsgrad = 2;
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &a, 1, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "defaults.amsgrad = 2");
  a = (fsdp_hyperparams_t)FSDP_ADAMW_DEFAULTS;
  a.maximize = -1;
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &a, 1, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "defaults.maximize = -1");
  h = (fsdp_hyperparams_t)FSDP_SGD_DEFAULTS;
  h.amsgrad = 1;
  CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &h, 1, &u, &opt),
              FSDP_ERR_INVALID_ARGUMENT, "amsgrad");
  CHECK(opt == NULL);
  /* A caller's struct from before 0.10 ends at eps: what follows is not read, the flags are 0. */
  {
    struct {
      fsdp_hyperparams_t h;
      int junk[4];
    } old;
    memset(&old, 0x7f, sizeof old);
    old.h = (fsdp_hyperparams_t)FSDP_ADAMW_DEFAULTS;
    old.h.size = offsetof(fsdp_hyperparams_t, eps) + sizeof(double);
    old.h.amsgrad = 5, old.h.maximize = 7; /* beyond size: ignored */
    CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &old.h, 1, &u, &opt));
    fsdp_hyperparams_t got = FSDP_SGD_DEFAULTS;
    got.amsgrad = got.maximize = 9;
    CHECK_OK(fsdp_optimizer_get_hyperparams(opt, 0, &got));
    CHECK_MSG(got.amsgrad == 0 && got.maximize == 0 && got.lr == 1e-3 && got.weight_decay == 1e-2,
              "a struct from before 0.10 gets amsgrad = maximize = 0");
    /* A bad flag in set_hyperparams changes nothing. */
    fsdp_hyperparams_t bad = got;
    bad.lr = 0.5, bad.maximize = 3;
    CHECK_FAILS(fsdp_optimizer_set_hyperparams(opt, 0, &bad), FSDP_ERR_INVALID_ARGUMENT,
                "hp.maximize = 3");
    bad.maximize = 0, bad.amsgrad = -2;
    CHECK_FAILS(fsdp_optimizer_set_hyperparams(opt, 0, &bad), FSDP_ERR_INVALID_ARGUMENT,
                "hp.amsgrad = -2");
    CHECK_FAILS(fsdp_optimizer_add_group(opt, "*.bias", &bad, NULL, NULL),
                FSDP_ERR_INVALID_ARGUMENT, "hp.amsgrad");
    fsdp_hyperparams_t after = FSDP_SGD_DEFAULTS;
    CHECK_OK(fsdp_optimizer_get_hyperparams(opt, 0, &after));
    CHECK_MSG(after.lr == 1e-3 && after.amsgrad == 0 && after.maximize == 0,
              "a refused set_hyperparams changes nothing");
    /* An older caller reading: only its size is written. */
    struct {
      fsdp_hyperparams_t h;
    } small;
    memset(&small, 0x55, sizeof small);
    small.h.size = offsetof(fsdp_hyperparams_t, amsgrad);
    CHECK_OK(fsdp_optimizer_get_hyperparams(opt, 0, &small.h));
    CHECK_MSG(
        small.h.amsgrad == 0x55555555 && small.h.maximize == 0x55555555 && small.h.eps == 1e-8,
        "get_hyperparams writes no field beyond the caller's size");
    CHECK_OK(fsdp_optimizer_destroy(&opt));
  }
  /* One rank with a bad argument: every rank fails, none hangs. */
  if (th_size() > 1) {
    fsdp_hyperparams_t mine = FSDP_SGD_DEFAULTS;
    if (th_rank() == 1) mine.lr = -1.0;
    CHECK_FAILS(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &mine, 1, &u, &opt),
                th_rank() == 1 ? FSDP_ERR_INVALID_ARGUMENT : FSDP_ERR_MISMATCH, "");
  }
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, NULL, 1, &u, &opt));
  CHECK_FAILS(fsdp_optimizer_add_group(opt, "", &h, NULL, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "pattern");
  CHECK_FAILS(fsdp_clip_grad_norm(ctx, 0.0, 2.0, NULL), FSDP_ERR_INVALID_ARGUMENT, "max_norm");
  CHECK_FAILS(fsdp_clip_grad_norm(ctx, -1.0, 2.0, NULL), FSDP_ERR_INVALID_ARGUMENT, "max_norm");
  CHECK_FAILS(fsdp_clip_grad_norm(ctx, 1.0, 0.5, NULL), FSDP_ERR_INVALID_ARGUMENT, "norm_type");
  /* A gradient written and never reduced (the reduce forgotten): refused, nothing changed. The
   * same after a no_sync reduce, which keeps it local. Reduced, or zeroed, the step runs. */
  float *g = NULL, *shard = NULL;
  size_t shard_n = 0;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, &shard_n));
  float* before = malloc(shard_n * sizeof(float) + 1);
  memcpy(before, shard, shard_n * sizeof(float));
  CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
  g[0] = 1.0f;
  CHECK_FAILS(fsdp_optimizer_step(opt), FSDP_ERR_STATE, "no reduction took");
  CHECK_OK(fsdp_set_grad_sync(ctx, 0));
  CHECK_OK(fsdp_reduce_grads(u));
  CHECK_FAILS(fsdp_optimizer_step(opt), FSDP_ERR_STATE, "fsdp_reduce_grads");
  CHECK_MSG(memcmp(before, shard, shard_n * sizeof(float)) == 0, "a refused step changes nothing");
  CHECK_OK(fsdp_set_grad_sync(ctx, 1));
  CHECK_OK(fsdp_zero_grads(u));
  CHECK_OK(fsdp_optimizer_step(opt)); /* discarded: nothing to update */
  CHECK_MSG(memcmp(before, shard, shard_n * sizeof(float)) == 0,
            "a zeroed gradient updates nothing");
  CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
  g[0] = 1.0f;
  CHECK_OK(fsdp_reduce_grads(u));
  CHECK_OK(fsdp_optimizer_step(opt));
  free(before);
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_FAILS(fsdp_optimizer_step(opt), FSDP_ERR_INVALID_HANDLE, "opt");
  CHECK_OK(fsdp_unit_destroy(&u));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_optimizers");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  hp_t sgd = {0.1f, 0.01f, 0.9f, 0.1f, 0.9f, 0.999f, 1e-8f, 0, 0, 0};
  hp_t sgd_nd = {0.05f, 0.0f, 0.9f, 0.1f, 0.9f, 0.999f, 1e-8f, 0, 0, 0};
  run_optimizer(ctx, FSDP_OPTIMIZER_SGD, sgd, sgd_nd, "SGD momentum, dampening, weight decay");
  sgd.maximize = sgd_nd.maximize = 1;
  run_optimizer(ctx, FSDP_OPTIMIZER_SGD, sgd, sgd_nd, "SGD maximize");
  hp_t nest = {0.1f, 0.01f, 0.8f, 0.0f, 0.9f, 0.999f, 1e-8f, 1, 0, 0};
  hp_t nest_nd = {0.2f, 0.0f, 0.8f, 0.0f, 0.9f, 0.999f, 1e-8f, 1, 0, 0};
  run_optimizer(ctx, FSDP_OPTIMIZER_SGD, nest, nest_nd, "SGD Nesterov");
  nest.maximize = nest_nd.maximize = 1;
  run_optimizer(ctx, FSDP_OPTIMIZER_SGD, nest, nest_nd, "SGD Nesterov maximize");
  hp_t plain = {0.1f, 0.0f, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f, 0, 0, 0};
  run_optimizer(ctx, FSDP_OPTIMIZER_SGD, plain, plain, "SGD without momentum");
  plain.wd = 0.01f, plain.maximize = 1;
  run_optimizer(ctx, FSDP_OPTIMIZER_SGD, plain, plain, "SGD without momentum, maximize");
  hp_t adamw = {1e-2f, 0.1f, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f, 0, 0, 0};
  hp_t adamw_nd = {3e-2f, 0.0f, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f, 0, 0, 0};
  run_optimizer(ctx, FSDP_OPTIMIZER_ADAMW, adamw, adamw_nd, "AdamW");
  adamw.amsgrad = adamw_nd.amsgrad = 1;
  run_optimizer(ctx, FSDP_OPTIMIZER_ADAMW, adamw, adamw_nd, "AdamW AMSGrad");
  adamw.maximize = adamw_nd.maximize = 1;
  run_optimizer(ctx, FSDP_OPTIMIZER_ADAMW, adamw, adamw_nd, "AdamW AMSGrad maximize");
  adamw.amsgrad = adamw_nd.amsgrad = 0;
  run_optimizer(ctx, FSDP_OPTIMIZER_ADAMW, adamw, adamw_nd, "AdamW maximize");
  check_bad_input(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
