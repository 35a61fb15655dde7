/* HFSDP (cfg->hfsdp) against plain hybrid sharding, its reference. Two contexts train the same
 * model side by side on the same data: one hybrid, one hybrid with HFSDP (each rank updating
 * 1/(F*N) of every unit). At 4 ranks as 2 emulated nodes of 2 (FSDP_RANKS_PER_NODE=2: F = 2,
 * N = 2; and bfloat16 alone as 4 nodes of 1: F = 1, N = 4; with the argument "hpz", at 8 ranks as
 * 4 nodes of 2 with F = 4, N = 2 and hpZ on in the HFSDP run) their losses, clipped-gradient norms
 * and parameters (unsharded, in param_dtype, and the float32 masters) must be equal bit for bit
 * after every AdamW step, with two micro-batches accumulated without gradient sync, an active
 * gradient clip, an embedding tied to the head and a frozen parameter; for bfloat16 compute with
 * float32 reduction, and for float32, over the transport FSDP_TRANSPORT says (CTest runs it once
 * per host transport). An evaluation pass after every step (forward only, units out of order)
 * gives both the same loss, and a state dict taken mid-step (fsdp_gather_params between
 * micro-batches) equals the one before the step. Memory: the gradient shards and the optimizer
 * state are hybrid's divided by N, and equal the layout fsdp.h states computed here; the shards are
 * hybrid's in float32, and with bfloat16 compute the trainable blocks in bfloat16 beside 1/(F*N) of
 * the float32 masters. Checkpoints: HFSDP's file loads into a hybrid context and a full-sharding
 * one, hybrid's into an HFSDP one, and the loaded contexts train on as the saving ones do.
 * Initialization by a callback and from rank 0 reaches the split masters. Bad input: hfsdp = 2,
 * hfsdp without hybrid sharding, fsdp_shard_grad under HFSDP, fsdp_shard_data with split masters.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { V = 37, D = 6, H = 10, NFROZEN = 13, NUNITS = 3, STEPS = 3, MICRO = 2 };

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t u[NUNITS];
  int alias; /* the head's index of the tied embedding */
  fsdp_optimizer_t opt;
  fsdp_dtype_t param_dtype;
} Run;

/* Argument "hpz": hybrid sharding over shard groups of 4 (spanning two emulated nodes of 2 at 8
 * ranks), the HFSDP run with hpZ on as well. */
static int with_hpz = 0;

static const int64_t kEmbed[2] = {V, D}, kW1[2] = {D, H}, kB1[1] = {H}, kFrozen[1] = {NFROZEN},
                     kWo[2] = {H, D};

static float init_value(int unit, int param, size_t e) {
  uint64_t s = ((uint64_t)unit << 48) ^ ((uint64_t)param << 32) ^ e;
  return (float)th_uniform(&s);
}

/* The target every parameter element is pulled towards: depends on the rank (data parallel) and
 * the micro-batch. */
static float target(int rank, int micro, int step, int unit, int param, size_t e) {
  uint64_t s = ((uint64_t)(rank + 1) << 56) ^ ((uint64_t)micro << 52) ^ ((uint64_t)step << 44) ^
               ((uint64_t)unit << 40) ^ ((uint64_t)param << 32) ^ e;
  return (float)th_uniform(&s);
}

static float bf16_to_float(uint16_t b) {
  const uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) { /* round to nearest even; no NaN here */
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static float get(const Run* r, const void* p, size_t e) {
  return r->param_dtype == FSDP_BFLOAT16 ? bf16_to_float(((const uint16_t*)p)[e])
                                         : ((const float*)p)[e];
}

static void add(const Run* r, void* p, size_t e, float v) {
  if (r->param_dtype == FSDP_BFLOAT16)
    ((uint16_t*)p)[e] = float_to_bf16(bf16_to_float(((uint16_t*)p)[e]) + v);
  else
    ((float*)p)[e] += v;
}

static int make_context(Run* r, fsdp_sharding_strategy_t strategy, int hfsdp,
                        fsdp_dtype_t param_dtype) {
  memset(r, 0, sizeof *r);
  r->param_dtype = param_dtype == FSDP_DTYPE_AUTO ? FSDP_FLOAT32 : param_dtype;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = strategy;
  cfg.hfsdp = hfsdp;
  cfg.param_dtype = param_dtype;
  cfg.reduce_dtype = param_dtype == FSDP_DTYPE_AUTO ? FSDP_DTYPE_AUTO : FSDP_FLOAT32;
  cfg.max_unsharded = 4;
  if (with_hpz && strategy == FSDP_HYBRID_SHARD) {
    cfg.sharding_factor = 4;
    cfg.hpz = hfsdp;
  }
  if (fsdp_init(MPI_COMM_WORLD, &cfg, &r->ctx) != FSDP_SUCCESS) {
    CHECK_MSG(0, fsdp_last_error());
    return 0;
  }
  const fsdp_param_desc_t embed[1] = {{"embed.weight", 2, kEmbed, FSDP_FLOAT32, 1}};
  const fsdp_param_desc_t block[3] = {{"block.w1", 2, kW1, FSDP_FLOAT32, 1},
                                      {"block.frozen", 1, kFrozen, FSDP_FLOAT32, 0},
                                      {"block.b1", 1, kB1, FSDP_FLOAT32, 1}};
  const fsdp_param_desc_t head[1] = {{"head.wo", 2, kWo, FSDP_FLOAT32, 1}};
  const fsdp_param_desc_t* descs[NUNITS] = {embed, block, head};
  const int counts[NUNITS] = {1, 3, 1};
  for (int u = 0; u < NUNITS; ++u) {
    float* values[3];
    const void* initial[3];
    for (int p = 0; p < counts[u]; ++p) {
      size_t n = 1;
      for (int k = 0; k < descs[u][p].ndim; ++k) n *= (size_t)descs[u][p].shape[k];
      values[p] = malloc(n * sizeof(float));
      for (size_t e = 0; e < n; ++e) values[p][e] = init_value(u, p, e);
      initial[p] = values[p];
    }
    CHECK_OK(fsdp_unit_create(r->ctx, counts[u], descs[u], initial, &r->u[u]));
    for (int p = 0; p < counts[u]; ++p) free(values[p]);
  }
  CHECK_OK(fsdp_unit_tie(r->u[2], "head.embed", r->u[0], 0, &r->alias));
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  hp.lr = 0.01;
  hp.weight_decay = 0.1;
  CHECK_OK(fsdp_optimizer_create(r->ctx, FSDP_OPTIMIZER_ADAMW, &hp, NUNITS, r->u, &r->opt));
  return 1;
}

static void destroy(Run* r) {
  CHECK_OK(fsdp_optimizer_destroy(&r->opt));
  for (int u = NUNITS - 1; u >= 0; --u) CHECK_OK(fsdp_unit_destroy(&r->u[u]));
  CHECK_OK(fsdp_finalize(&r->ctx));
}

/* Elements of parameter `index` of unit `u` (the tie: the embedding's). */
static size_t numel_of(int u, int index) {
  static const size_t sizes[NUNITS][3] = {{V * D}, {D * H, NFROZEN, H}, {H * D, V * D}};
  return sizes[u][index];
}

/* Unit u's float32 masters (fsdp_gather_params: under HFSDP with bfloat16 compute each rank holds
 * 1/(F*N) of them), one new array per parameter. */
typedef struct {
  float* p[3];
} Masters;

static Masters gather_unit(fsdp_unit_t unit, int u) {
  Masters m = {{NULL, NULL, NULL}};
  for (int p = 0; p < (u == 1 ? 3 : 1); ++p) m.p[p] = malloc(numel_of(u, p) * sizeof(float));
  CHECK_OK(fsdp_gather_params(unit, (void* const*)m.p));
  return m;
}

/* Whether two gatherings of unit u differ; frees both. */
static int masters_differ_free(Masters a, Masters b, int u) {
  int bad = 0;
  for (int p = 0; p < (u == 1 ? 3 : 1); ++p) {
    bad += memcmp(a.p[p], b.p[p], numel_of(u, p) * sizeof(float)) != 0;
    free(a.p[p]);
    free(b.p[p]);
  }
  return bad != 0;
}

/* 0.5 (p - t)^2 summed over every parameter the unit uses, and (`with_grad`) its gradient p - t
 * (half of it through the tie) added into the full gradient of the trainable ones. */
static double use_unit(Run* r, int u, int micro, int step, int with_grad) {
  static const int nparams[NUNITS] = {1, 3, 2};
  double loss = 0.0;
  for (int p = 0; p < nparams[u]; ++p) {
    const int index = u == 2 && p == 1 ? r->alias : p;
    const int trainable = with_grad && !(u == 1 && p == 1);
    void* w = NULL;
    void* g = NULL;
    CHECK_OK(fsdp_param_data(r->u[u], index, &w));
    if (trainable) CHECK_OK(fsdp_grad_data(r->u[u], index, &g));
    const float weight = u == 2 && p == 1 ? 0.5f : 1.0f;
    for (size_t e = 0; e < numel_of(u, p); ++e) {
      const float diff = get(r, w, e) - target(th_rank(), micro, step, u, p, e);
      loss += 0.5 * weight * (double)diff * diff;
      if (trainable) add(r, g, e, weight * diff);
    }
  }
  return loss;
}

/* One optimizer step: MICRO micro-batches (sync on the last only), forward then backward over
 * the units, a clip, the step. Returns the loss summed over ranks and micro-batches; *norm the
 * clip's norm. */
static double train_step(Run* r, int step, double* norm) {
  double loss = 0.0;
  const Masters before = gather_unit(r->u[1], 1);
  for (int m = 0; m < MICRO; ++m) {
    if (m == 1) /* a state dict mid-step, gradients accumulated: the masters are the step's */
      CHECK_MSG(!masters_differ_free(before, gather_unit(r->u[1], 1), 1),
                "masters changed before the step");
    CHECK_OK(fsdp_set_grad_sync(r->ctx, m == MICRO - 1));
    CHECK_OK(fsdp_unshard(r->u[0])); /* the head's tie reads it: held through the pass */
    for (int u = 1; u < NUNITS; ++u) CHECK_OK(fsdp_unshard(r->u[u]));
    for (int u = NUNITS - 1; u >= 0; --u) {
      loss += use_unit(r, u, m, step, 1);
      CHECK_OK(fsdp_reshard(r->u[u]));
      CHECK_OK(fsdp_reduce_grads(r->u[u]));
    }
  }
  CHECK_OK(fsdp_clip_grad_norm(r->ctx, 0.5, 2.0, norm));
  CHECK_OK(fsdp_optimizer_step(r->opt));
  CHECK_OK(fsdp_optimizer_zero_grad(r->opt));
  double total = 0.0;
  MPI_Allreduce(&loss, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

/* An evaluation pass: forward only, the blocks in reverse order (the embedding held for the
 * head's tie). Returns the loss summed over ranks. */
static double evaluate(Run* r, int step) {
  double loss = 0.0;
  CHECK_OK(fsdp_unshard(r->u[0]));
  for (int u = NUNITS - 1; u >= 1; --u) {
    CHECK_OK(fsdp_unshard(r->u[u]));
    loss += use_unit(r, u, MICRO, step, 0);
    CHECK_OK(fsdp_reshard(r->u[u]));
  }
  loss += use_unit(r, 0, MICRO, step, 0);
  CHECK_OK(fsdp_reshard(r->u[0]));
  double total = 0.0;
  MPI_Allreduce(&loss, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

/* Unit u's unsharded parameters (param dtype bytes) and float32 masters (fsdp_gather_params) in
 * `a` and `b` differ in how many units. */
static int differences(Run* a, Run* b) {
  int bad = 0;
  for (int u = 0; u < NUNITS; ++u) {
    size_t na = 0, nb = 0;
    CHECK_OK(fsdp_unit_numel(a->u[u], &na, NULL, NULL));
    CHECK_OK(fsdp_unit_numel(b->u[u], &nb, NULL, NULL));
    CHECK(na == nb);
    CHECK_OK(fsdp_unshard(a->u[u]));
    CHECK_OK(fsdp_unshard(b->u[u]));
    for (int p = 0; p < (u == 1 ? 3 : 1); ++p) {
      void *pa = NULL, *pb = NULL;
      CHECK_OK(fsdp_param_data(a->u[u], p, &pa));
      CHECK_OK(fsdp_param_data(b->u[u], p, &pb));
      const size_t es = a->param_dtype == FSDP_BFLOAT16 ? 2 : 4;
      bad += memcmp(pa, pb, numel_of(u, p) * es) != 0;
    }
    CHECK_OK(fsdp_reshard(a->u[u]));
    CHECK_OK(fsdp_reshard(b->u[u]));
    bad += masters_differ_free(gather_unit(a->u[u], u), gather_unit(b->u[u], u), u);
  }
  return bad;
}

/* fsdp.h's layout: each trainable section's block is N pieces of ceil(n / (F N)) elements
 * rounded up to a multiple of 8, n the section's elements with each parameter starting at a
 * multiple of 8. Returns the bytes of one piece of every unit (float32 storage). */
static size_t piece_bytes(int F, int N) {
  const size_t sections[NUNITS] = {V * D, (D * H + 7) / 8 * 8 + H, H * D};
  size_t total = 0;
  for (int u = 0; u < NUNITS; ++u) {
    const size_t blocks = (size_t)F * (size_t)N;
    total += ((sections[u] + blocks - 1) / blocks + 7) / 8 * 8 * sizeof(float);
  }
  return total;
}

static void compare_training(fsdp_dtype_t param_dtype, const char* label, int save) {
  Run hybrid, hfsdp;
  if (!make_context(&hybrid, FSDP_HYBRID_SHARD, 0, param_dtype)) return;
  if (!make_context(&hfsdp, FSDP_HYBRID_SHARD, 1, param_dtype)) return;
  int F = 0, N = 0;
  CHECK_OK(fsdp_group_info(hfsdp.ctx, FSDP_GROUP_SHARD, NULL, &F));
  CHECK_OK(fsdp_group_info(hfsdp.ctx, FSDP_GROUP_REPLICATE, NULL, &N));
  CHECK_MSG(N >= 2, "the test needs replicas (4 ranks, FSDP_RANKS_PER_NODE=2 or 1)");
  if (N > 2 && param_dtype != FSDP_BFLOAT16) {
    /* Over more than two replicas hybrid's all-reduce and HFSDP's reduce-scatter may add the
     * float32 partial sums in different orders. Gradients computed in bfloat16 sum exactly in
     * float32 here (few significant bits), so that comparison stays bitwise at any N. */
    destroy(&hybrid);
    destroy(&hfsdp);
    return;
  }
  char msg[256];
  for (int step = 0; step < STEPS; ++step) {
    double na = 0.0, nb = 0.0;
    const double la = train_step(&hybrid, step, &na);
    const double lb = train_step(&hfsdp, step, &nb);
    snprintf(msg, sizeof msg, "%s step %d: loss %.17g vs %.17g, norm %.17g vs %.17g", label, step,
             la, lb, na, nb);
    CHECK_MSG(la == lb && na == nb, msg);
    CHECK_MSG(na > 0.5, "the clip is active (norm above max_norm)");
    snprintf(msg, sizeof msg, "%s step %d: parameters differ", label, step);
    CHECK_MSG(differences(&hybrid, &hfsdp) == 0, msg);
    const double ea = evaluate(&hybrid, step), eb = evaluate(&hfsdp, step);
    snprintf(msg, sizeof msg, "%s step %d: evaluation loss %.17g vs %.17g", label, step, ea, eb);
    CHECK_MSG(ea == eb && ea > 0.0, msg);
  }
  fsdp_memory_stats_t ma = {sizeof ma}, mb = {sizeof mb};
  CHECK_OK(fsdp_memory_stats(hybrid.ctx, &ma));
  CHECK_OK(fsdp_memory_stats(hfsdp.ctx, &mb));
  snprintf(msg, sizeof msg, "%s: gradient shards %zu (hybrid %zu), state %zu (hybrid %zu)", label,
           mb.grad_shard_bytes, ma.grad_shard_bytes, mb.optimizer_state_bytes,
           ma.optimizer_state_bytes);
  CHECK_MSG(mb.grad_shard_bytes * (size_t)N == ma.grad_shard_bytes, msg);
  CHECK_MSG(mb.grad_shard_bytes == piece_bytes(F, N), msg);
  CHECK_MSG(mb.optimizer_state_bytes == 2 * mb.grad_shard_bytes, msg);
  CHECK_MSG(mb.optimizer_state_bytes * (size_t)N == ma.optimizer_state_bytes, msg);
  if (with_hpz) /* the forward's reshards kept secondary partitions: hpZ was at work */
    CHECK_MSG(mb.peak_secondary_bytes > 0 && ma.peak_secondary_bytes == 0, "hpZ kept partitions");
  /* The shard: hybrid's in float32; with bfloat16 compute each trainable block (N pieces) is
   * bfloat16 and one float32 piece, the masters, is kept beside it. */
  const size_t pb = piece_bytes(F, N);
  const size_t shard =
      param_dtype == FSDP_BFLOAT16 ? ma.shard_bytes - (size_t)N * pb / 2 + pb : ma.shard_bytes;
  snprintf(msg, sizeof msg, "%s: shards %zu (hybrid %zu, fsdp.h's layout %zu)", label,
           mb.shard_bytes, ma.shard_bytes, shard);
  CHECK_MSG(mb.shard_bytes == shard, msg);

  if (save) {
    /* Checkpoints, both ways, and into full sharding: the loaded contexts train on alike. */
    const char* fa = "test_hfsdp.hybrid.h5";
    const char* fb = "test_hfsdp.hfsdp.h5";
    fsdp_checkpoint_options_t with_opt = FSDP_CHECKPOINT_OPTIONS_INIT;
    with_opt.noptimizers = 1;
    with_opt.optimizers = &hybrid.opt;
    CHECK_OK(fsdp_checkpoint_save(hybrid.ctx, fa, &with_opt));
    with_opt.optimizers = &hfsdp.opt;
    /* In the background, HFSDP's next step running meanwhile: the file holds the state before. */
    fsdp_request_t req = NULL;
    CHECK_OK(fsdp_checkpoint_save_async(hfsdp.ctx, fb, &with_opt, &req));
    double n1 = 0;
    const double l1 = train_step(&hfsdp, STEPS, &n1);
    CHECK_OK(fsdp_wait(&req));
    Run from_hfsdp, from_hybrid, full;
    make_context(&from_hfsdp, FSDP_HYBRID_SHARD, 0, param_dtype);
    make_context(&from_hybrid, FSDP_HYBRID_SHARD, 1, param_dtype);
    make_context(&full, FSDP_FULL_SHARD, 0, param_dtype);
    with_opt.optimizers = &from_hfsdp.opt;
    CHECK_OK(fsdp_checkpoint_load(from_hfsdp.ctx, fb, &with_opt, NULL));
    with_opt.optimizers = &from_hybrid.opt;
    CHECK_OK(fsdp_checkpoint_load(from_hybrid.ctx, fa, &with_opt, NULL));
    with_opt.optimizers = &full.opt;
    CHECK_OK(fsdp_checkpoint_load(full.ctx, fb, &with_opt, NULL));
    snprintf(msg, sizeof msg, "%s: loaded parameters differ", label);
    CHECK_MSG(differences(&hybrid, &full) == 0, msg);
    double n0 = 0, n2 = 0, n3 = 0;
    const double l0 = train_step(&hybrid, STEPS, &n0);
    const double l2 = train_step(&from_hfsdp, STEPS, &n2);
    const double l3 = train_step(&from_hybrid, STEPS, &n3);
    snprintf(msg, sizeof msg, "%s after loading: losses %.17g %.17g %.17g %.17g", label, l0, l1, l2,
             l3);
    CHECK_MSG(l0 == l1 && l0 == l2 && l0 == l3 && n0 == n1 && n0 == n2 && n0 == n3, msg);
    snprintf(msg, sizeof msg, "%s: parameters differ after a step from a checkpoint", label);
    CHECK_MSG(differences(&hybrid, &from_hfsdp) == 0, msg);
    CHECK_MSG(differences(&hfsdp, &from_hybrid) == 0, msg);
    /* Full sharding sums each gradient over 4 ranks in another order (float32 rounding), so
     * only the loss, computed from the loaded parameters, is exact; the norm agrees to float32
     * rounding. */
    double n4 = 0;
    const double l4 = train_step(&full, STEPS, &n4);
    snprintf(msg, sizeof msg, "%s full shard from HFSDP: loss %.17g vs %.17g, norm %.17g vs %.17g",
             label, l4, l0, n4, n0);
    CHECK_MSG(l4 == l0 && fabs(n4 - n0) <= 1e-5 * n0, msg);
    destroy(&from_hfsdp);
    destroy(&from_hybrid);
    destroy(&full);
    if (th_rank() == 0) {
      remove(fa);
      remove(fb);
    }
  }
  destroy(&hybrid);
  destroy(&hfsdp);
}

static int init_param(void* user_data, int index, const fsdp_param_desc_t* desc, void* data) {
  (void)user_data;
  size_t n = 1;
  for (int k = 0; k < desc->ndim; ++k) n *= (size_t)desc->shape[k];
  for (size_t e = 0; e < n; ++e) ((float*)data)[e] = init_value(1, index, e);
  return 0;
}

/* Split masters (HFSDP, bfloat16 compute): a unit initialized by a callback, on every rank or
 * from rank 0, holds the callback's values (fsdp_gather_params) and unshards them rounded to
 * bfloat16; fsdp_shard_data is refused (no float32 shard exists), with float32 it is not. */
static void initialization(void) {
  Run r;
  if (!make_context(&r, FSDP_HYBRID_SHARD, 1, FSDP_BFLOAT16)) return;
  const fsdp_param_desc_t block[3] = {{"block.w1", 2, kW1, FSDP_FLOAT32, 1},
                                      {"block.frozen", 1, kFrozen, FSDP_FLOAT32, 0},
                                      {"block.b1", 1, kB1, FSDP_FLOAT32, 1}};
  for (int from_rank0 = 0; from_rank0 < 2; ++from_rank0) {
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    o.init = init_param;
    o.sync_from_rank0 = from_rank0;
    fsdp_unit_t u = NULL;
    CHECK_OK(fsdp_unit_create_ex(r.ctx, 3, block, NULL, &o, &u));
    float* got[3];
    for (int p = 0; p < 3; ++p) got[p] = malloc(numel_of(1, p) * sizeof(float));
    CHECK_OK(fsdp_gather_params(u, (void* const*)got));
    CHECK_OK(fsdp_unshard(u));
    int bad = 0;
    for (int p = 0; p < 3; ++p) {
      void* w = NULL;
      CHECK_OK(fsdp_param_data(u, p, &w));
      for (size_t e = 0; e < numel_of(1, p); ++e) {
        const float v = init_value(1, p, e);
        bad += got[p][e] != v ||
               bf16_to_float(((const uint16_t*)w)[e]) != bf16_to_float(float_to_bf16(v));
      }
      free(got[p]);
    }
    CHECK_MSG(bad == 0, from_rank0 ? "initialized from rank 0" : "initialized by a callback");
    CHECK_OK(fsdp_reshard(u));
    void* data = NULL;
    CHECK_FAILS(fsdp_shard_data(u, &data, NULL), FSDP_ERR_UNSUPPORTED, "hfsdp");
    CHECK(data == NULL);
    CHECK_OK(fsdp_unit_destroy(&u));
  }
  destroy(&r);
}

static void bad_input(void) {
  fsdp_context_t ctx = NULL;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = FSDP_HYBRID_SHARD;
  cfg.hfsdp = 2;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->hfsdp");
  CHECK(ctx == NULL);
  cfg.hfsdp = 1;
  cfg.strategy = FSDP_FULL_SHARD;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->hfsdp");
  cfg.strategy = FSDP_NO_SHARD;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->hfsdp");
  cfg.strategy = FSDP_HYBRID_SHARD; /* refused before any device is looked for */
  cfg.memory_space = FSDP_MEMORY_CUDA;
  cfg.cpu_offload = 1;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_UNSUPPORTED, "cfg->hfsdp");
  CHECK(ctx == NULL);
  Run r;
  setenv("FSDP_DEBUG_COLLECTIVES", "1", 1); /* the step, collective under HFSDP, is compared */
  const int made = make_context(&r, FSDP_HYBRID_SHARD, 1, FSDP_DTYPE_AUTO);
  unsetenv("FSDP_DEBUG_COLLECTIVES");
  if (!made) return;
  void* g = NULL;
  CHECK_FAILS(fsdp_shard_grad(r.u[0], &g, NULL), FSDP_ERR_UNSUPPORTED, "hfsdp");
  CHECK_FAILS(fsdp_optimizer_state(r.opt, r.u[1], "exp_avg", &g, NULL), FSDP_ERR_UNSUPPORTED,
              "hfsdp");
  CHECK(g == NULL);
  CHECK_OK(fsdp_shard_data(r.u[1], &g, NULL)); /* float32: the shard is the masters' */
  /* Debug mode compares the step, collective under HFSDP, across ranks: agreed, it runs. */
  CHECK_OK(fsdp_optimizer_step(r.opt));
  destroy(&r);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_hfsdp");
  with_hpz = argc > 1 && !strcmp(argv[1], "hpz");
  bad_input();
  initialization();
  compare_training(FSDP_BFLOAT16, "bfloat16 / float32 reduce", 1);
  compare_training(FSDP_DTYPE_AUTO, "float32", 1);
  return th_finish();
}
