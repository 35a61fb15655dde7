/* The model of the checkpoint tests: named parameters of several shapes (one frozen), values and
 * gradients from closed formulas, unit groupings to save and load with, and the reference
 * training (ref_optim.h's AdamW on whole arrays), all independent of libfsdp's sharding. */
#ifndef FSDP_TEST_CKPT_MODEL_H
#define FSDP_TEST_CKPT_MODEL_H

#include <stdlib.h>
#include <string.h>

#include "fsdp.h"
#include "harness.h"
#include "ref_optim.h"

#define CM_NPARAMS 7
#define CM_LR 0.01
#define CM_WD 0.01

static const char* cm_names[CM_NPARAMS] = {"embed.weight",  "layer0.weight", "layer0.bias",
                                           "layer1.weight", "layer1.bias",   "norm.gain",
                                           "scale"};
static const int cm_ndim[CM_NPARAMS] = {2, 2, 1, 2, 1, 1, 0};
static const int64_t cm_shapes[CM_NPARAMS][2] = {{64, 33}, {5, 5}, {5, 1}, {3, 5},
                                                 {3, 1},   {5, 1}, {1, 1}};
static const int cm_trainable[CM_NPARAMS] = {1, 1, 1, 1, 1, 0, 1};

static size_t cm_numel(int p) {
  size_t n = 1;
  for (int d = 0; d < cm_ndim[p]; ++d) n *= (size_t)cm_shapes[p][d];
  return n;
}

/* Few mantissa bits: the mean of identical gradients over any rank count is exact. */
static float cm_init(int p, size_t e) {
  return (float)((int)((p * 131 + e * 17) % 23) - 11) / 8.0f;
}
static float cm_grad(int p, size_t e, int step) {
  return (float)((int)((p * 7 + e * 13 + (size_t)step * 5) % 19) - 9) / 16.0f;
}

/* Groupings: each a list of units, each a list of parameter indices ending with -1. */
static const int cm_group_a[][CM_NPARAMS + 1] = {{0, 1, -1}, {2, 3, -1}, {4, 5, 6, -1}, {-1}};
static const int cm_group_b[][CM_NPARAMS + 1] = {{0, -1}, {1, 2, 3, 4, -1}, {5, 6, -1}, {-1}};
static const int cm_group_c[][CM_NPARAMS + 1] = {{6, 5, 4, 3, 2, 1, 0, -1}, {-1}};

static const int (*cm_grouping(const char* name))[CM_NPARAMS + 1] {
  if (strcmp(name, "b") == 0) return cm_group_b;
  if (strcmp(name, "c") == 0) return cm_group_c;
  return cm_group_a;
}

typedef struct {
  fsdp_unit_t units[CM_NPARAMS];
  int nunits;
  int params[CM_NPARAMS][CM_NPARAMS + 1]; /* per unit: model parameter indices, -1 ended */
  fsdp_optimizer_t opt;
} cm_model_t;

/* Creates the units of `grouping` with the initial values, and an AdamW optimizer over them. */
static void cm_create(fsdp_context_t ctx, const char* grouping, cm_model_t* m) {
  const int(*g)[CM_NPARAMS + 1] = cm_grouping(grouping);
  memset(m, 0, sizeof *m);
  for (int u = 0; g[u][0] >= 0; ++u) {
    fsdp_param_desc_t d[CM_NPARAMS];
    const void* init[CM_NPARAMS];
    float* values[CM_NPARAMS];
    int n = 0;
    for (; g[u][n] >= 0; ++n) {
      const int p = g[u][n];
      d[n].name = cm_names[p];
      d[n].ndim = cm_ndim[p];
      d[n].shape = cm_ndim[p] ? cm_shapes[p] : NULL;
      d[n].dtype = FSDP_FLOAT32;
      d[n].requires_grad = cm_trainable[p];
      values[n] = malloc(cm_numel(p) * sizeof(float));
      for (size_t e = 0; e < cm_numel(p); ++e) values[n][e] = cm_init(p, e);
      init[n] = values[n];
      m->params[u][n] = p;
    }
    m->params[u][n] = -1;
    CHECK_OK(fsdp_unit_create(ctx, n, d, init, &m->units[u]));
    for (int i = 0; i < n; ++i) free(values[i]);
    m->nunits = u + 1;
  }
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  hp.lr = CM_LR, hp.weight_decay = CM_WD;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &hp, m->nunits, m->units, &m->opt));
}

/* One training step: every rank writes the same full gradients (so the mean is them). */
static void cm_step(cm_model_t* m, int step) {
  for (int u = 0; u < m->nunits; ++u) {
    for (int i = 0; m->params[u][i] >= 0; ++i) {
      const int p = m->params[u][i];
      if (!cm_trainable[p]) continue;
      float* g = NULL;
      CHECK_OK(fsdp_grad_data(m->units[u], i, (void**)&g));
      if (!g) return;
      for (size_t e = 0; e < cm_numel(p); ++e) g[e] = cm_grad(p, e, step);
    }
    CHECK_OK(fsdp_reduce_grads(m->units[u]));
  }
  CHECK_OK(fsdp_optimizer_step(m->opt));
  CHECK_OK(fsdp_optimizer_zero_grad(m->opt));
}

/* The reference: parameter p after `steps` AdamW steps on whole arrays, the first `old_steps` of
 * them in the arithmetic of libfsdp before 0.14 (a checkpoint such a version wrote). */
static float* cm_reference_after(int p, int steps, int old_steps) {
  const size_t n = cm_numel(p);
  float* w = malloc(n * sizeof(float));
  float* mom = calloc(n, sizeof(float));
  float* var = calloc(n, sizeof(float));
  float* g = malloc(n * sizeof(float));
  for (size_t e = 0; e < n; ++e) w[e] = cm_init(p, e);
  for (int t = 1; cm_trainable[p] && t <= steps; ++t) {
    for (size_t e = 0; e < n; ++e) g[e] = cm_grad(p, e, t);
    if (t <= old_steps)
      ref_adamw_step_before_0_14(w, mom, var, g, n, t, CM_LR, CM_WD, 0.9, 0.999, 1e-8f);
    else
      ref_adamw_step(w, mom, var, g, n, t, CM_LR, CM_WD, 0.9, 0.999, 1e-8f);
  }
  free(mom), free(var), free(g);
  return w;
}

/* The reference: parameter p after `steps` AdamW steps on whole arrays. */
static float* cm_reference(int p, int steps) {
  return cm_reference_after(p, steps, 0);
}

/* Every parameter of the model equals the reference after `steps` steps (the first `old_steps`
 * as libfsdp computed them before 0.14), bit for bit. */
static void cm_check_after(cm_model_t* m, int steps, int old_steps, const char* when) {
  for (int u = 0; u < m->nunits; ++u) {
    CHECK_OK(fsdp_unshard(m->units[u]));
    for (int i = 0; m->params[u][i] >= 0; ++i) {
      const int p = m->params[u][i];
      float* got = NULL;
      CHECK_OK(fsdp_param_data(m->units[u], i, (void**)&got));
      float* want = cm_reference_after(p, steps, old_steps);
      size_t bad = 0;
      for (size_t e = 0; got && e < cm_numel(p); ++e) bad += memcmp(&got[e], &want[e], 4) != 0;
      char msg[160];
      snprintf(msg, sizeof msg, "%s: %s after %d steps: %zu elements differ", when, cm_names[p],
               steps, bad);
      CHECK_MSG(bad == 0, msg);
      free(want);
    }
    CHECK_OK(fsdp_reshard(m->units[u]));
  }
}

/* cm_check_after with every step in today's arithmetic. */
static void cm_check(cm_model_t* m, int steps, const char* when) {
  cm_check_after(m, steps, 0, when);
}

static void cm_destroy(cm_model_t* m) {
  CHECK_OK(fsdp_optimizer_destroy(&m->opt));
  for (int u = 0; u < m->nunits; ++u) CHECK_OK(fsdp_unit_destroy(&m->units[u]));
}

static fsdp_context_t cm_context(const char* strategy) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  if (strcmp(strategy, "hybrid2") == 0) cfg.strategy = FSDP_HYBRID_SHARD, cfg.sharding_factor = 2;
  if (strcmp(strategy, "noshard") == 0) cfg.strategy = FSDP_NO_SHARD;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  return ctx;
}

#endif
