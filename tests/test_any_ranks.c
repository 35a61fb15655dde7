/* Units used by any subset of ranks (FSDP_USED_BY_ANY_RANKS) and fsdp_step_boundary.
 *
 * A mixture of experts with top-1 routing: each expert W_e (D x D) is its own unit used by any
 * subset of ranks, a bias b every rank uses is a collective unit; y = W_e x + b, loss the sum over
 * the global batch of |y - target|^2 / 2 / N. Each rank routes its tokens to two of the E experts
 * (which two changes every step), so experts go unused on some ranks each step and, at 2 ranks,
 * on every rank in some steps. Three SGD steps with momentum, then the experts are compared with a
 * single-process computation of the same routing done here (every token, one process, plain C),
 * as every rank reads them on its own: rank 0 alone (an evaluation pass on one rank, while the
 * others go on to a collective), then every rank a different expert. Runs in full, hybrid, HFSDP
 * and no sharding, the flat and dim-0 layouts and a float32 compute dtype over float64 masters.
 * A checkpoint saved after training and loaded after one more step gives the saved values back to
 * a rank that reads alone. Also: ranks unsharding different units (wrong for collective units,
 * which debug mode refuses; right for these), bfloat16 reads of float32 shards in both layouts
 * (bit for bit), gradient accumulation over micro-batches used by different ranks. Bad input: a
 * rank that skips the boundary and steps, a step after a call that ended the update phase
 * (FSDP_ERR_STEP_BOUNDARY, nothing updated, then recovered), an unknown options->used_by, in
 * debug mode a boundary one rank skips or doubles, and without it ranks that made different
 * numbers of collective calls before a boundary (nothing reduced). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { D = 5, E = 4, TOK = 3, STEPS = 3 };
static const double kLr = 0.1, kMomentum = 0.9;

static int W, me;

static double value(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t s = (a * 1000003u + b) * 0x9e3779b97f4a7c15ull ^ (c + 17u);
  th_uniform(&s);
  return th_uniform(&s);
}
/* Token t of rank r in step s: its input, target and expert. Each rank uses two experts. */
static double input(int s, int r, int t, int i) {
  return value(1u + (uint64_t)s, (uint64_t)(r * TOK + t), (uint64_t)i);
}
static double target(int s, int r, int t, int i) {
  return value(100u + (uint64_t)s, (uint64_t)(r * TOK + t), (uint64_t)i);
}
static int route(int s, int r, int t) {
  return (r + s + t % 2) % E;
}
static double w_init(int e, int k) {
  return 0.3 * value(7u, (uint64_t)e, (uint64_t)k);
}
static double b_init(int i) {
  return 0.1 * value(9u, 0u, (uint64_t)i);
}

/* The single-process run: every token of the global batch in one loop. */
typedef struct {
  double w[E][D * D], b[D];
  double mw[E][D * D], mb[D];
  int seen_w[E], seen_b; /* momentum buffers exist (PyTorch: from the first gradient) */
} Model;

static void reference_init(Model* m) {
  memset(m, 0, sizeof *m);
  for (int e = 0; e < E; ++e)
    for (int k = 0; k < D * D; ++k) m->w[e][k] = w_init(e, k);
  for (int i = 0; i < D; ++i) m->b[i] = b_init(i);
}

static void sgd(double* p, double* buf, const double* g, int n, int* seen) {
  for (int k = 0; k < n; ++k) {
    buf[k] = *seen ? kMomentum * buf[k] + g[k] : g[k];
    p[k] -= kLr * buf[k];
  }
  *seen = 1;
}

static void reference_step(Model* m, int s) {
  double gw[E][D * D], gb[D];
  int used[E] = {0};
  memset(gw, 0, sizeof gw);
  memset(gb, 0, sizeof gb);
  const double n = (double)(W * TOK);
  for (int r = 0; r < W; ++r)
    for (int t = 0; t < TOK; ++t) {
      const int e = route(s, r, t);
      used[e] = 1;
      for (int i = 0; i < D; ++i) {
        double y = m->b[i];
        for (int j = 0; j < D; ++j) y += m->w[e][i * D + j] * input(s, r, t, j);
        const double d = (y - target(s, r, t, i)) / n;
        gb[i] += d;
        for (int j = 0; j < D; ++j) gw[e][i * D + j] += d * input(s, r, t, j);
      }
    }
  /* A unit nobody used this step has no gradient anywhere: the library reduces nothing for it
   * and its optimizer skips it, as torch.optim skips a parameter whose grad is None. */
  for (int e = 0; e < E; ++e)
    if (used[e]) sgd(m->w[e], m->mw[e], gw[e], D * D, &m->seen_w[e]);
  sgd(m->b, m->mb, gb, D, &m->seen_b);
}

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t expert[E], bias;
  fsdp_optimizer_t opt;
  fsdp_dtype_t compute; /* the experts' param_dtype */
} Job;

static double read_param(fsdp_dtype_t t, const void* p, int k) {
  return t == FSDP_FLOAT32 ? (double)((const float*)p)[k] : ((const double*)p)[k];
}
static void add_param(fsdp_dtype_t t, void* p, int k, double v) {
  if (t == FSDP_FLOAT32)
    ((float*)p)[k] += (float)v;
  else
    ((double*)p)[k] += v;
}

/* One training step of this rank's tokens: unshard what it routes to, write gradients, reduce
 * (kept for the boundary for the experts), reshard. */
static void forward_backward(Job* j, int s) {
  void* wp[E] = {0};
  void* gw[E] = {0};
  double *bp = NULL, *gb = NULL;
  CHECK_OK(fsdp_unshard(j->bias));
  CHECK_OK(fsdp_param_data(j->bias, 0, (void**)&bp));
  CHECK_OK(fsdp_grad_data(j->bias, 0, (void**)&gb));
  const double n = (double)(W * TOK);
  for (int t = 0; t < TOK; ++t) {
    const int e = route(s, me, t);
    if (!wp[e]) {
      CHECK_OK(fsdp_unshard(j->expert[e]));
      CHECK_OK(fsdp_param_data(j->expert[e], 0, &wp[e]));
      CHECK_OK(fsdp_grad_data(j->expert[e], 0, &gw[e]));
    }
    if (!wp[e] || !gw[e] || !bp || !gb) return;
    for (int i = 0; i < D; ++i) {
      double y = bp[i];
      for (int k = 0; k < D; ++k)
        y += read_param(j->compute, wp[e], i * D + k) * input(s, me, t, k);
      const double d = (y - target(s, me, t, i)) / n;
      gb[i] += d;
      for (int k = 0; k < D; ++k) add_param(j->compute, gw[e], i * D + k, d * input(s, me, t, k));
    }
  }
  for (int e = 0; e < E; ++e)
    if (wp[e]) {
      CHECK_OK(fsdp_reduce_grads(j->expert[e])); /* local: kept for the boundary */
      CHECK_OK(fsdp_reshard(j->expert[e]));
    }
  CHECK_OK(fsdp_reduce_grads(j->bias));
  CHECK_OK(fsdp_reshard(j->bias));
}

/* Whether expert e, read by this rank alone, holds the reference's values. */
static void check_expert(Job* j, const Model* ref, int e, const char* when) {
  void* p = NULL;
  CHECK_OK(fsdp_unshard(j->expert[e]));
  CHECK_OK(fsdp_param_data(j->expert[e], 0, &p));
  const double tol = j->compute == FSDP_FLOAT32 ? 1e-6 : 1e-13;
  double worst = 0.0;
  for (int k = 0; p && k < D * D; ++k)
    worst = fmax(worst, fabs(read_param(j->compute, p, k) - ref->w[e][k]));
  char msg[160];
  snprintf(msg, sizeof msg, "%s: expert %d read by rank %d alone differs by %g", when, e, me,
           worst);
  CHECK_MSG(p && worst <= tol, msg);
  CHECK_OK(fsdp_reshard(j->expert[e]));
}

/* This rank's shards of every unit, to tell that a refused step changed nothing. */
static double shard_sum(Job* j) {
  double sum = 0.0;
  for (int e = 0; e <= E; ++e) {
    fsdp_unit_t u = e < E ? j->expert[e] : j->bias;
    void* d = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_shard_data(u, &d, &n));
    for (size_t k = 0; d && k < n; ++k) sum += fabs(((double*)d)[k]) * (double)(k + 1);
  }
  return sum;
}

static void run(fsdp_sharding_strategy_t strategy, int factor, int hfsdp, fsdp_unit_layout_t layout,
                int bad_input) {
  const fsdp_dtype_t compute = FSDP_FLOAT64;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = strategy;
  cfg.sharding_factor = factor;
  cfg.hfsdp = hfsdp;
  cfg.grad_reduction = FSDP_REDUCE_SUM;
  Job j;
  memset(&j, 0, sizeof j);
  j.compute = compute;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &j.ctx));
  if (!j.ctx) return;
  const int64_t wshape[2] = {D, D}, bshape[1] = {D};
  for (int e = 0; e < E; ++e) {
    double w[D * D];
    for (int k = 0; k < D * D; ++k) w[k] = w_init(e, k);
    char name[16];
    char pname[32];
    snprintf(name, sizeof name, "expert.%d", e);
    snprintf(pname, sizeof pname, "expert.%d.weight", e);
    fsdp_param_desc_t d = {pname, 2, wshape, FSDP_FLOAT64, 1};
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    o.name = name;
    o.layout = layout;
    o.param_dtype = compute;
    o.used_by = FSDP_USED_BY_ANY_RANKS;
    const void* values[1] = {w};
    CHECK_OK(fsdp_unit_create_ex(j.ctx, 1, &d, values, &o, &j.expert[e]));
  }
  double b[D];
  for (int i = 0; i < D; ++i) b[i] = b_init(i);
  fsdp_param_desc_t bd = {"bias", 1, bshape, FSDP_FLOAT64, 1};
  const void* bvalues[1] = {b};
  CHECK_OK(fsdp_unit_create(j.ctx, 1, &bd, bvalues, &j.bias));
  fsdp_unit_t all[E + 1];
  memcpy(all, j.expert, sizeof j.expert);
  all[E] = j.bias;
  fsdp_hyperparams_t hp = FSDP_SGD_DEFAULTS;
  hp.lr = kLr;
  hp.momentum = kMomentum;
  CHECK_OK(fsdp_optimizer_create(j.ctx, FSDP_OPTIMIZER_SGD, &hp, E + 1, all, &j.opt));
  if (!j.opt) return;

  Model ref;
  reference_init(&ref);
  /* Before any step, every rank reads a different expert alone. */
  check_expert(&j, &ref, me % E, "initial values");
  for (int s = 0; s < STEPS; ++s) {
    forward_backward(&j, s);
    if (bad_input && s == 0 && W > 1 && me == 1) {
      /* Rank 1 forgets the boundary: its step is refused and changes nothing. */
      const double before = shard_sum(&j);
      CHECK_FAILS(fsdp_optimizer_step(j.opt), FSDP_ERR_STEP_BOUNDARY, "fsdp_step_boundary");
      CHECK(shard_sum(&j) == before);
    }
    CHECK_OK(fsdp_step_boundary(j.ctx));
    if (bad_input && s == 1) {
      /* A collective between the boundary and the update ends the update phase: the step is
       * refused, naming it, on every rank; the next boundary opens a new phase. */
      double x = 1.0;
      CHECK_OK(fsdp_allreduce(j.ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, &x, 1));
      CHECK(x == (double)W);
      const double before = shard_sum(&j);
      CHECK_FAILS(fsdp_optimizer_step(j.opt), FSDP_ERR_STEP_BOUNDARY, "fsdp_allreduce");
      CHECK(shard_sum(&j) == before);
      CHECK_OK(fsdp_step_boundary(j.ctx));
    }
    CHECK_OK(fsdp_optimizer_step(j.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(j.opt));
    reference_step(&ref, s);
  }
  /* An evaluation pass on rank 0 alone, while the others go on to a collective that ends their
   * update phase (a caller's all-reduce), or restarts it (a norm): rank 0 reads their updated
   * shards, and waits for nobody who waits for it. */
  if (me == 0)
    for (int e = 0; e < E; ++e) check_expert(&j, &ref, e, "rank 0's evaluation");
  if (bad_input) {
    double norm = -1.0;
    CHECK_OK(fsdp_clip_grad_norm(j.ctx, 1.0, 2.0, &norm));
    CHECK(norm == 0.0); /* the gradients were zeroed after the step */
  } else {
    double x = (double)me;
    CHECK_OK(fsdp_allreduce(j.ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, &x, 1));
  }
  for (int e = 0; e < E; ++e) check_expert(&j, &ref, (me + e) % E, "after training");

  /* A checkpoint: saved, one more step, loaded; the last rank then reads the saved values alone. */
  char path[256];
  snprintf(path, sizeof path, "any_ranks_%d_%d_%d_%d.h5", (int)strategy, factor, hfsdp,
           (int)layout);
  CHECK_OK(fsdp_checkpoint_save(j.ctx, path, NULL));
  const Model saved = ref;
  forward_backward(&j, STEPS);
  CHECK_OK(fsdp_step_boundary(j.ctx));
  CHECK_OK(fsdp_optimizer_step(j.opt));
  CHECK_OK(fsdp_optimizer_zero_grad(j.opt));
  reference_step(&ref, STEPS);
  CHECK_OK(fsdp_step_boundary(j.ctx)); /* a step of no gradients: reduces nothing */
  if (me == W - 1)
    for (int e = 0; e < E; ++e) check_expert(&j, &ref, e, "one step after the save");
  CHECK_OK(fsdp_checkpoint_load(j.ctx, path, NULL, NULL));
  if (me == W - 1)
    for (int e = 0; e < E; ++e) check_expert(&j, &saved, e, "after the load");
  CHECK_OK(fsdp_finalize(&j.ctx));
  if (me == 0) unlink(path);
}

/* float32 rounded to bfloat16, to nearest even (independent of the library's conversion). */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A float32 unit computed in bfloat16, with frozen parameters too (two sections): each rank reads
 * it alone, every rank's blocks converted and placed as the all-gather does, at a different
 * moment on each rank; the values must be the bfloat16 roundings of the initial ones, bit for bit.
 */
static void converted_reads(fsdp_unit_layout_t layout) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  if (!ctx) return;
  const int64_t shapes[3][2] = {{7, 3}, {5, 1}, {3, 11}};
  fsdp_param_desc_t d[3] = {{"a", 2, shapes[0], FSDP_FLOAT32, 1},
                            {"frozen", 2, shapes[1], FSDP_FLOAT32, 0},
                            {"c", 2, shapes[2], FSDP_FLOAT32, 1}};
  float values[3][33];
  const void* v[3];
  for (int p = 0; p < 3; ++p) {
    for (int k = 0; k < 33; ++k) values[p][k] = (float)value(11u, (uint64_t)p, (uint64_t)k);
    v[p] = values[p];
  }
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = FSDP_BFLOAT16;
  o.layout = layout;
  o.used_by = FSDP_USED_BY_ANY_RANKS;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 3, d, v, &o, &u));
  for (int turn = 0; u && turn < W; ++turn) {
    if (turn == me) {
      CHECK_OK(fsdp_unshard(u));
      for (int p = 0; p < 3; ++p) {
        const uint16_t* got = NULL;
        CHECK_OK(fsdp_param_data(u, p, (void**)&got));
        const int n = (int)(shapes[p][0] * shapes[p][1]);
        int bad = 0;
        for (int k = 0; got && k < n; ++k) bad += got[k] != to_bf16(values[p][k]);
        CHECK_MSG(got && bad == 0, "a bfloat16 unit read alone differs from the rounded values");
      }
      CHECK_OK(fsdp_reshard(u));
    }
    MPI_Barrier(MPI_COMM_WORLD); /* one reader at a time: the others wait outside the library */
  }
  CHECK_OK(fsdp_finalize(&ctx));
}

/* A context of `cfg` with two units of 8 float64 elements: one used by any subset of ranks, one
 * collective. NULL after a failure (recorded). */
static fsdp_context_t pair_of_units(const fsdp_config_t* cfg, fsdp_unit_t* any, fsdp_unit_t* all) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, cfg, &ctx));
  if (!ctx) return NULL;
  const int64_t n = 8;
  fsdp_param_desc_t d = {"w", 1, &n, FSDP_FLOAT64, 1};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.used_by = FSDP_USED_BY_ANY_RANKS;
  CHECK_OK(fsdp_unit_create_ex(ctx, 1, &d, NULL, &o, any));
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, all));
  return ctx;
}

/* Debug mode: a rank that skips the boundary is caught before anything runs. */
static void skipped_boundary_in_debug_mode(void) {
  if (W < 2) return;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.debug_collectives = 1;
  fsdp_unit_t any = NULL, all = NULL;
  fsdp_context_t ctx = pair_of_units(&cfg, &any, &all);
  if (!ctx) return;
  if (me == 0)
    CHECK_FAILS(fsdp_step_boundary(ctx), FSDP_ERR_STEP_BOUNDARY, "fsdp_unshard");
  else
    CHECK_FAILS(fsdp_unshard(all), FSDP_ERR_STEP_BOUNDARY, "fsdp_step_boundary");
  /* Nothing ran: the ranks go on together. */
  CHECK_OK(fsdp_step_boundary(ctx));
  /* Rank 0 doubles the boundary while the others start the next step. */
  CHECK_OK(fsdp_step_boundary(ctx));
  if (me == 0)
    CHECK_FAILS(fsdp_step_boundary(ctx), FSDP_ERR_STEP_BOUNDARY, "fsdp_unshard");
  else
    CHECK_FAILS(fsdp_unshard(all), FSDP_ERR_STEP_BOUNDARY, "fsdp_step_boundary");
  CHECK_OK(fsdp_step_boundary(ctx));
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Without debug mode, the boundary compares how many collective calls each rank made since the
 * last one. Under no sharding an unshard completes on one rank alone, so a rank can make one more
 * than the others without waiting: the boundary fails on every rank and reduces nothing. */
static void uneven_calls_before_boundary(void) {
  if (W < 2) return;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = FSDP_NO_SHARD;
  cfg.grad_reduction = FSDP_REDUCE_SUM;
  fsdp_unit_t any = NULL, all = NULL;
  fsdp_context_t ctx = pair_of_units(&cfg, &any, &all);
  if (!ctx) return;
  double* g = NULL;
  CHECK_OK(fsdp_grad_data(any, 0, (void**)&g));
  if (g) g[0] = 1.0;
  CHECK_OK(fsdp_reduce_grads(any));
  for (int k = 0; k < (me == 0 ? 2 : 1); ++k) {
    CHECK_OK(fsdp_unshard(all));
    CHECK_OK(fsdp_reshard(all));
  }
  CHECK_FAILS(fsdp_step_boundary(ctx), FSDP_ERR_STEP_BOUNDARY, "different numbers of collective");
  /* Nothing was reduced: the gradient is still this rank's, and the next boundary takes it. */
  CHECK_OK(fsdp_step_boundary(ctx));
  double* shard = NULL;
  size_t numel = 0;
  CHECK_OK(fsdp_shard_grad(any, (void**)&shard, &numel));
  CHECK(shard && shard[0] == (double)W);
  CHECK_OK(fsdp_finalize(&ctx));
}

/* The issue this answers: ranks unsharding different units of the same size. Collective units in
 * debug mode (FSDP_DEBUG=1): refused on every rank, nothing read. The same with units used by any
 * subset of ranks, without debug mode: each rank reads its own unit's values. */
static void different_units_per_rank(void) {
  if (W < 2) return;
  for (int any = 0; any <= 1; ++any) {
    if (!any) setenv("FSDP_DEBUG", "1", 1);
    fsdp_context_t ctx = NULL;
    CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
    unsetenv("FSDP_DEBUG");
    if (!ctx) return;
    const int64_t n = 64;
    fsdp_param_desc_t d[2] = {{"a", 1, &n, FSDP_FLOAT32, 1}, {"b", 1, &n, FSDP_FLOAT32, 1}};
    float va[64], vb[64];
    for (int k = 0; k < 64; ++k) va[k] = (float)k, vb[k] = (float)(1000 + k);
    const void* values[2][1] = {{va}, {vb}};
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    o.used_by = any ? FSDP_USED_BY_ANY_RANKS : FSDP_USED_BY_ALL_RANKS;
    fsdp_unit_t u[2] = {NULL, NULL};
    for (int k = 0; k < 2; ++k) CHECK_OK(fsdp_unit_create_ex(ctx, 1, &d[k], values[k], &o, &u[k]));
    const int mine = me % 2;
    if (!any) {
      CHECK_FAILS(fsdp_unshard(u[mine]), FSDP_ERR_MISMATCH, "different collective calls");
    } else {
      float* p = NULL;
      CHECK_OK(fsdp_unshard(u[mine]));
      CHECK_OK(fsdp_param_data(u[mine], 0, (void**)&p));
      const float* want = mine ? vb : va;
      CHECK(p && memcmp(p, want, sizeof va) == 0);
      CHECK_OK(fsdp_reshard(u[mine]));
    }
    CHECK_OK(fsdp_finalize(&ctx));
  }
}

/* Gradient accumulation: the ranks that use the unit in each micro-batch differ; a boundary under
 * fsdp_set_grad_sync(ctx, 0) keeps the gradients, the one after the last micro-batch reduces the
 * sum of all of them. Values are small integers: every sum is exact. */
static void accumulation(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.grad_reduction = FSDP_REDUCE_SUM;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  if (!ctx) return;
  const int64_t n = 16;
  fsdp_param_desc_t d = {"w", 1, &n, FSDP_FLOAT64, 1};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.used_by = FSDP_USED_BY_ANY_RANKS;
  fsdp_unit_t u = NULL;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 1, &d, NULL, &o, &u));
  fsdp_hyperparams_t hp = FSDP_SGD_DEFAULTS;
  hp.lr = 1.0;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &hp, 1, &u, &opt));
  if (!opt) return;
  double want = 0.0;
  for (int micro = 0; micro < 2; ++micro) {
    CHECK_OK(fsdp_set_grad_sync(ctx, micro == 1));
    const int uses = micro == 1 || me % 2 == 0; /* the first micro-batch: even ranks only */
    if (uses) {
      double* g = NULL;
      CHECK_OK(fsdp_unshard(u));
      CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
      for (int k = 0; g && k < n; ++k) g[k] += (double)((micro ? 10 : 1) * (me + 1) + k);
      CHECK_OK(fsdp_reduce_grads(u));
      CHECK_OK(fsdp_reshard(u));
    }
    for (int r = 0; r < W; ++r)
      if (micro == 1 || r % 2 == 0) want -= (double)((micro ? 10 : 1) * (r + 1));
    CHECK_OK(fsdp_step_boundary(ctx)); /* the first one, under no_sync, keeps the gradients */
  }
  CHECK_OK(fsdp_optimizer_step(opt));
  /* The last rank reads alone while the others finalize straight after their update. */
  if (me == W - 1) {
    double* p = NULL;
    CHECK_OK(fsdp_unshard(u));
    CHECK_OK(fsdp_param_data(u, 0, (void**)&p));
    int bad = 0;
    const int uses0 = (W + 1) / 2; /* ranks that wrote in the first micro-batch */
    for (int k = 0; p && k < n; ++k) bad += p[k] != want - (double)k * (double)(uses0 + W);
    CHECK_MSG(p && bad == 0, "accumulated gradients of a unit used by some ranks");
    CHECK_OK(fsdp_reshard(u));
  }
  CHECK_OK(fsdp_finalize(&ctx));
}

static void bad_options(void) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  if (!ctx) return;
  const int64_t n = 8;
  fsdp_param_desc_t d = {"w", 1, &n, FSDP_FLOAT32, 1};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.used_by = 7;
  fsdp_unit_t u = NULL;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, 1, &d, NULL, &o, &u), FSDP_ERR_INVALID_ARGUMENT,
              "options->used_by");
  CHECK(u == NULL);
  CHECK_FAILS(fsdp_step_boundary(NULL), FSDP_ERR_INVALID_HANDLE, "ctx");
  /* Without such units the boundary checks its argument and does nothing. */
  CHECK_OK(fsdp_step_boundary(ctx));
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_any_ranks");
  W = th_size();
  me = th_rank();
  bad_options();
  different_units_per_rank();
  accumulation();
  converted_reads(FSDP_LAYOUT_FLAT);
  converted_reads(FSDP_LAYOUT_DIM0);
  run(FSDP_FULL_SHARD, 0, 0, FSDP_LAYOUT_FLAT, /*bad_input=*/1);
  run(FSDP_FULL_SHARD, 0, 0, FSDP_LAYOUT_DIM0, 0);
  run(FSDP_NO_SHARD, 0, 0, FSDP_LAYOUT_FLAT, 0);
  if (W == 4) {
    run(FSDP_HYBRID_SHARD, 2, 0, FSDP_LAYOUT_FLAT, 0);
    run(FSDP_HYBRID_SHARD, 2, 1, FSDP_LAYOUT_DIM0, 0);
  }
  skipped_boundary_in_debug_mode();
  uneven_calls_before_boundary();
  return th_finish();
}
