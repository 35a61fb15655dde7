/* hpZ (fsdp_config_t.hpz, doc/hpz.md) at 4 ranks as 2 emulated nodes of 2 (FSDP_RANKS_PER_NODE=2):
 * the same training run with hpz on and off must give bitwise the same losses and the same shards
 * after N AdamW steps, with every host transport, bfloat16 parameters reduced in float32, a
 * micro-batch accumulated without sync, gradient clipping, a tie and frozen parameters. Each step
 * also runs an evaluation pass (forward only, then the training forward: it must read current
 * parameters) and a forward use of one unit out of order between clipping and the step (its
 * secondary must not survive the step). The secondary's bytes are checked exactly against the
 * formula computed here, and the trace gives each run's all-gathers, node-local ones apart, from
 * which the inter-node bytes per step are computed by the ring model test_plan_memory states: they
 * must be lower with hpz, by exactly what the node-local all-gathers no longer send. With MPI, the
 * same with prefetch on. Where hpZ means nothing (hybrid, F = 2 ranks per node) it changes
 * nothing. fsdp_shard_data drops the secondary (the next unshard reads what was written); debug
 * mode turns ranks that disagree on keeping one into FSDP_ERR_MISMATCH. Bad input: hpz = 2, hpz
 * with FSDP_NO_SHARD, nodes of unequal size. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

enum { UNITS = 3, STEPS = 3, MICRO = 2, NW = 320, NF = 12, RPN = 2 };

typedef struct {
  double losses[STEPS][1 + MICRO]; /* the evaluation pass, then each micro-batch */
  float shards[UNITS][1024];
  size_t shard_numel;
  size_t secondary_after_forward, peak_secondary, secondary_after_backward;
  size_t secondary_out_of_order, secondary_after_step;
  size_t ag_full, ag_node; /* all-gathers of this rank from its trace */
  double inter_bytes;      /* sent across nodes per step, all ranks */
} Run;

/* Each section of a unit: numel rounded up to F blocks of a multiple of 8 elements
 * (doc/concepts.md), in bfloat16. */
static size_t block(size_t numel, int F) {
  const size_t b = (numel + (size_t)F - 1) / (size_t)F;
  return (b + 7) / 8 * 8;
}
static size_t unsharded_bytes(int F) {
  return (block(NW, F) + block(NF, F)) * (size_t)F * 2;
}

static float coef(int unit, size_t e, int micro, int step) {
  return 0.25f +
         (float)((e * 7 + (size_t)unit * 3 + (size_t)micro * 5 + (size_t)step + (size_t)th_rank()) %
                 11) /
             16.0f;
}

static void read_param(fsdp_unit_t u, int index, size_t n, float* out) {
  void* p = NULL;
  CHECK_OK(fsdp_param_data(u, index, &p));
  CHECK_OK(fsdp_convert(out, FSDP_FLOAT32, p, FSDP_BFLOAT16, n));
}

/* Adds `add` into the bfloat16 full gradient of parameter `index` (as autograd adds into .grad). */
static void add_grad(fsdp_unit_t u, int index, size_t n, const float* add) {
  void* g = NULL;
  float have[NW];
  CHECK_OK(fsdp_grad_data(u, index, &g));
  CHECK_OK(fsdp_convert(have, FSDP_FLOAT32, g, FSDP_BFLOAT16, n));
  for (size_t e = 0; e < n; ++e) have[e] += add[e];
  CHECK_OK(fsdp_convert(g, FSDP_BFLOAT16, have, FSDP_FLOAT32, n));
}

/* The model: unit k's loss is sum c w^2 / 2 + sum frozen; unit 2 also uses unit 0's w (tie) in
 * sum w0 w2 / 4. Forward reads the parameters; backward reads them again and writes gradients. */
static double forward_unit(fsdp_unit_t* u, int k, int micro, int step) {
  float w[NW], f[NF], w0[NW];
  read_param(u[k], 0, NW, w);
  read_param(u[k], 1, NF, f);
  double loss = 0.0;
  for (size_t e = 0; e < NW; ++e) loss += 0.5 * coef(k, e, micro, step) * w[e] * w[e];
  for (size_t e = 0; e < NF; ++e) loss += f[e];
  if (k == 2) {
    read_param(u[2], 2, NW, w0); /* the alias */
    for (size_t e = 0; e < NW; ++e) loss += 0.25 * w0[e] * w[e];
  }
  return loss;
}

static void backward_unit(fsdp_unit_t* u, int k, int micro, int step) {
  float w[NW], g[NW], w0[NW], g0[NW];
  read_param(u[k], 0, NW, w);
  if (k == 2) read_param(u[2], 2, NW, w0);
  for (size_t e = 0; e < NW; ++e) {
    g[e] = coef(k, e, micro, step) * w[e] + (k == 2 ? 0.25f * w0[e] : 0.0f);
    g0[e] = 0.25f * w[e];
  }
  add_grad(u[k], 0, NW, g);
  if (k == 2) add_grad(u[2], 2, NW, g0);
}

/* Forward in order; unit 2 needs unit 0 unsharded (the tie). */
static double forward(fsdp_unit_t* u, int micro, int step) {
  double loss = 0.0;
  CHECK_OK(fsdp_unshard(u[0]));
  loss += forward_unit(u, 0, micro, step);
  CHECK_OK(fsdp_unshard(u[1]));
  loss += forward_unit(u, 1, micro, step);
  CHECK_OK(fsdp_reshard(u[1]));
  CHECK_OK(fsdp_unshard(u[2]));
  loss += forward_unit(u, 2, micro, step);
  CHECK_OK(fsdp_reshard(u[2]));
  CHECK_OK(fsdp_reshard(u[0]));
  return loss;
}

static void backward(fsdp_unit_t* u, int micro, int step) {
  CHECK_OK(fsdp_unshard(u[0]));
  CHECK_OK(fsdp_unshard(u[2]));
  backward_unit(u, 2, micro, step);
  CHECK_OK(fsdp_reshard(u[2]));
  CHECK_OK(fsdp_reduce_grads(u[2]));
  CHECK_OK(fsdp_unshard(u[1]));
  backward_unit(u, 1, micro, step);
  CHECK_OK(fsdp_reshard(u[1]));
  CHECK_OK(fsdp_reduce_grads(u[1]));
  backward_unit(u, 0, micro, step);
  CHECK_OK(fsdp_reshard(u[0]));
  CHECK_OK(fsdp_reduce_grads(u[0]));
}

static size_t secondary_now(fsdp_context_t ctx, size_t* peak) {
  fsdp_memory_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  CHECK_OK(fsdp_memory_stats(ctx, &s));
  if (peak) *peak = s.peak_secondary_bytes;
  return s.secondary_bytes;
}

/* Sends of a ring collective of `bytes` over F ranks numbered node by node, from this rank. */
static double ring_inter(size_t bytes, int F) {
  const int p = th_rank() % F, first = th_rank() - p;
  const int next = first + (p + 1) % F;
  if (F == 1 || next / RPN == th_rank() / RPN) return 0.0;
  return (double)bytes * (F - 1) / F;
}

static void read_trace(const char* dir, int F, Run* r) {
  char path[512];
  snprintf(path, sizeof path, "%s/fsdp-trace-rank%d.json", dir, th_rank());
  FILE* f = fopen(path, "r");
  CHECK_MSG(f != NULL, path);
  if (!f) return;
  char line[1024];
  double inter = 0.0;
  while (fgets(line, sizeof line, f)) {
    const char* b = strstr(line, "\"bytes\": ");
    if (!b) continue;
    const size_t bytes = (size_t)strtoull(b + 9, NULL, 10);
    if (strstr(line, "{\"name\": \"all_gather\"")) {
      ++r->ag_full;
      inter += ring_inter(bytes, F);
    } else if (strstr(line, "{\"name\": \"all_gather_node\"")) {
      ++r->ag_node; /* inside the node: nothing crosses */
    } else if (strstr(line, "{\"name\": \"reduce_scatter\"")) {
      inter += ring_inter(bytes, F);
    }
  }
  fclose(f);
  MPI_Allreduce(&inter, &r->inter_bytes, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  r->inter_bytes /= STEPS;
}

/* `prefetch`: prefetch on in both phases (secondaries then read on the progress thread, and
 * prefetches released unused). */
/* FSDP_GROUP_NODE: with hpZ keeping a partition, the shard group's ranks on this node (the
 * emulated nodes are consecutive ranks); else this rank alone. Its allreduce sums world ranks. */
static void check_node_group(fsdp_context_t ctx, int keeps) {
  const int r = th_rank();
  int nrank = -1, nsize = -1, srank = -1;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_NODE, &nrank, &nsize));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  CHECK_MSG(keeps ? nsize == RPN && nrank == srank % RPN : nsize == 1 && nrank == 0,
            "fsdp_group_info(FSDP_GROUP_NODE): hpZ's node group, or this rank alone");
  double sum = (double)r;
  CHECK_OK(fsdp_allreduce(ctx, FSDP_GROUP_NODE, FSDP_OP_SUM, &sum, 1));
  const int first = r - r % RPN;
  CHECK_MSG(sum == (keeps ? (double)(RPN * first + RPN * (RPN - 1) / 2) : (double)r),
            "fsdp_allreduce over FSDP_GROUP_NODE sums the node group's ranks");
}

static void train(fsdp_transport_t transport, fsdp_sharding_strategy_t strategy, int F, int hpz,
                  int prefetch, const char* trace_dir, Run* r) {
  memset(r, 0, sizeof *r);
  if (th_rank() == 0) mkdir(trace_dir, 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  setenv("FSDP_TRACE", trace_dir, 1);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = strategy;
  cfg.sharding_factor = strategy == FSDP_HYBRID_SHARD ? F : 0;
  cfg.param_dtype = FSDP_BFLOAT16;
  cfg.reduce_dtype = FSDP_FLOAT32;
  cfg.transport = transport;
  cfg.hpz = hpz;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  unsetenv("FSDP_TRACE");
  if (!ctx) return;
  fsdp_transport_t got = FSDP_TRANSPORT_AUTO;
  CHECK_OK(fsdp_context_placement(ctx, NULL, NULL, NULL, &got));
  CHECK(got == transport);
  check_node_group(ctx, hpz && strategy == FSDP_FULL_SHARD);

  static const int64_t wshape[2] = {40, 8}, fshape[1] = {NF};
  const fsdp_param_desc_t d[2] = {{"w", 2, wshape, FSDP_FLOAT32, 1},
                                  {"frozen", 1, fshape, FSDP_FLOAT32, 0}};
  float w_init[NW], f_init[NF];
  fsdp_unit_t u[UNITS] = {NULL};
  for (int k = 0; k < UNITS; ++k) {
    for (size_t e = 0; e < NW; ++e)
      w_init[e] = 0.5f + (float)((e * 13 + (size_t)k * 5) % 17) / 8.0f;
    for (size_t e = 0; e < NF; ++e) f_init[e] = (float)(e + (size_t)k) / 4.0f;
    const void* init[2] = {w_init, f_init};
    CHECK_OK(fsdp_unit_create(ctx, 2, d, init, &u[k]));
  }
  int alias = -1;
  CHECK_OK(fsdp_unit_tie(u[2], "w0", u[0], 0, &alias));
  CHECK(alias == 2);
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  hp.lr = 1e-2;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &hp, UNITS, u, &opt));
  CHECK_OK(fsdp_set_prefetch(ctx, prefetch, prefetch));

  for (int step = 0; step < STEPS; ++step) {
    CHECK_OK(fsdp_begin_forward(ctx));
    r->losses[step][0] = forward(u, 0, step); /* evaluation: forward only */
    for (int m = 0; m < MICRO; ++m) {
      CHECK_OK(fsdp_set_grad_sync(ctx, m == MICRO - 1));
      CHECK_OK(fsdp_begin_forward(ctx));
      r->losses[step][1 + m] = forward(u, m, step);
      if (step == 0 && m == 0) r->secondary_after_forward = secondary_now(ctx, &r->peak_secondary);
      CHECK_OK(fsdp_begin_backward(ctx));
      backward(u, m, step);
      if (step == 0 && m == 0) r->secondary_after_backward = secondary_now(ctx, NULL);
    }
    double norm = 0.0;
    CHECK_OK(fsdp_clip_grad_norm(ctx, 1.0, 2.0, &norm));
    /* A forward use out of order, between clipping and the step: its secondary must go. */
    CHECK_OK(fsdp_unshard(u[1]));
    float w[NW];
    read_param(u[1], 0, NW, w);
    CHECK_OK(fsdp_reshard(u[1]));
    if (step == 0) r->secondary_out_of_order = secondary_now(ctx, NULL);
    CHECK_OK(fsdp_optimizer_step(opt));
    if (step == 0) r->secondary_after_step = secondary_now(ctx, NULL);
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
  }
  for (int k = 0; k < UNITS; ++k) {
    float* s = NULL;
    CHECK_OK(fsdp_shard_data(u[k], (void**)&s, &r->shard_numel));
    if (s && r->shard_numel <= 1024) memcpy(r->shards[k], s, r->shard_numel * sizeof(float));
  }
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_finalize(&ctx));
  read_trace(trace_dir, F, r);
}

static void same_run(const Run* a, const Run* b, const char* what) {
  CHECK_MSG(memcmp(a->losses, b->losses, sizeof a->losses) == 0, what);
  CHECK_MSG(a->shard_numel == b->shard_numel, what);
  int same = 1;
  for (int k = 0; k < UNITS; ++k)
    same &= memcmp(a->shards[k], b->shards[k], a->shard_numel * sizeof(float)) == 0;
  CHECK_MSG(same, what);
}

static void compare_on_two_nodes(fsdp_transport_t t, const char* name) {
  const int F = th_size();
  char dir_off[128], dir_on[128], what[160];
  snprintf(dir_off, sizeof dir_off, "hpz_trace_%s_off", name);
  snprintf(dir_on, sizeof dir_on, "hpz_trace_%s_on", name);
  static Run off, on;
  train(t, FSDP_FULL_SHARD, F, 0, 0, dir_off, &off);
  train(t, FSDP_FULL_SHARD, F, 1, 0, dir_on, &on);
  snprintf(what, sizeof what, "%s: hpz on and off give the same losses and shards", name);
  same_run(&off, &on, what);
  if (t == FSDP_TRANSPORT_MPI) {
    static Run prefetched;
    char dir_pf[128];
    snprintf(dir_pf, sizeof dir_pf, "hpz_trace_%s_prefetch", name);
    train(t, FSDP_FULL_SHARD, F, 1, 1, dir_pf, &prefetched);
    snprintf(what, sizeof what, "%s: hpz with prefetch gives the same losses and shards", name);
    same_run(&off, &prefetched, what);
    CHECK_MSG(prefetched.ag_node > 0, what);
  }
  /* Each unit's secondary: 1/R of its unsharded bfloat16 parameters. After the first forward every
   * unit keeps one; backward (gradients written) uses them and keeps none; the out-of-order use
   * keeps one, which the step drops. */
  const size_t S = unsharded_bytes(F) / RPN;
  snprintf(what, sizeof what, "%s: secondary bytes", name);
  CHECK_MSG(on.secondary_after_forward == UNITS * S && on.peak_secondary == UNITS * S, what);
  CHECK_MSG(on.secondary_after_backward == 0 && on.secondary_out_of_order == S, what);
  CHECK_MSG(on.secondary_after_step == 0, what);
  CHECK_MSG(off.secondary_after_forward == 0 && off.peak_secondary == 0, what);
  /* Per step: evaluation 3 + 2 micro-batches x (3 forward + 3 backward) + 1 out of order = 16
   * unshards. With hpz, those after a forward use read a secondary: the first micro-batch's forward
   * (after the evaluation) and both backwards, 9; those after a step (the evaluation) or after a
   * backward (the second micro-batch's forward, the out-of-order use) gather from every node, 7. */
  snprintf(what, sizeof what, "%s: all-gathers from the trace", name);
  CHECK_MSG(off.ag_full == 16 * STEPS && off.ag_node == 0, what);
  CHECK_MSG(on.ag_full == 7 * STEPS && on.ag_node == 9 * STEPS, what);
  snprintf(what, sizeof what, "%s: inter-node bytes per step with hpz %.0f, without %.0f", name,
           on.inter_bytes, off.inter_bytes);
  CHECK_MSG(on.inter_bytes < off.inter_bytes, what);
  /* Exactly: the 9 node-local all-gathers per step no longer send (F-1)/F of the unit from each
   * rank whose ring successor is on the next node (one per node). */
  const double saved = 9.0 * (double)unsharded_bytes(F) * (F - 1) / F * (F / RPN);
  CHECK_MSG(off.inter_bytes - on.inter_bytes == saved, what);
  if (th_rank() == 0) printf("%s\n", what);
}

/* Hybrid with F = 2 = ranks per node: every shard group is inside a node, hpz changes nothing. */
static void check_meaningless(fsdp_transport_t t, const char* name) {
  char dir_off[128], dir_on[128], what[160];
  snprintf(dir_off, sizeof dir_off, "hpz_trace_%s_hybrid_off", name);
  snprintf(dir_on, sizeof dir_on, "hpz_trace_%s_hybrid_on", name);
  static Run off, on;
  train(t, FSDP_HYBRID_SHARD, RPN, 0, 0, dir_off, &off);
  train(t, FSDP_HYBRID_SHARD, RPN, 1, 0, dir_on, &on);
  snprintf(what, sizeof what, "%s hybrid: hpz means nothing inside a node", name);
  same_run(&off, &on, what);
  CHECK_MSG(on.peak_secondary == 0 && on.ag_node == 0 && on.ag_full == off.ag_full, what);
}

static void check_bad_input(void) {
  fsdp_context_t ctx = NULL;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.hpz = 2;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->hpz");
  cfg.hpz = 1;
  cfg.strategy = FSDP_NO_SHARD;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->hpz");
  /* Nodes of 3 and 1 ranks. */
  cfg.strategy = FSDP_FULL_SHARD;
  cfg.transport = FSDP_TRANSPORT_MPI;
  setenv("FSDP_RANKS_PER_NODE", "3", 1);
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->hpz");
  setenv("FSDP_RANKS_PER_NODE", "2", 1);
  CHECK(ctx == NULL);
}

/* fsdp_shard_data hands out a writable shard: the secondary goes, and the next unshard reads
 * what was written there. */
static void check_shard_write(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_MPI;
  cfg.hpz = 1;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  static const int64_t shape[1] = {NW};
  const fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, &u));
  const int F = th_size();
  const size_t S = block(NW, F) * (size_t)F * sizeof(float) / RPN;
  CHECK_OK(fsdp_unshard(u));
  CHECK_OK(fsdp_reshard(u));
  CHECK(secondary_now(ctx, NULL) == S);
  float* shard = NULL;
  size_t n = 0;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, &n));
  CHECK(secondary_now(ctx, NULL) == 0);
  for (size_t j = 0; j < n; ++j) shard[j] = 1000.0f + (float)((size_t)th_rank() * n + j);
  CHECK_OK(fsdp_unshard(u));
  float* w = NULL;
  CHECK_OK(fsdp_param_data(u, 0, (void**)&w));
  int bad = 0;
  for (size_t e = 0; w && e < NW; ++e) bad += w[e] != 1000.0f + (float)e;
  CHECK_MSG(bad == 0, "the unshard after fsdp_shard_data reads the written shards");
  CHECK_OK(fsdp_reshard(u));
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Debug mode: a rank that wrote a gradient in a hold its peers used for forward only keeps no
 * secondary; the next unshard fails alike on every rank instead of hanging. */
static void check_debug_mismatch(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_MPI;
  cfg.debug_collectives = 1;
  cfg.hpz = 1;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  static const int64_t shape[1] = {NW};
  const fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, &u));
  CHECK_OK(fsdp_unshard(u));
  void* g = NULL;
  if (th_rank() == 0) CHECK_OK(fsdp_grad_data(u, 0, &g));
  CHECK_OK(fsdp_reshard(u));
  CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_MISMATCH, "hpZ");
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_hpz");
  unsetenv("FSDP_TRANSPORT"); /* it would override each run's cfg.transport */
  if (th_size() != 4 || th_ranks_per_node() != RPN) {
    if (th_rank() == 0) printf("SKIP: needs 4 ranks as 2 nodes of 2 (FSDP_RANKS_PER_NODE=2)\n");
    MPI_Finalize();
    return 77;
  }
  check_bad_input();
  check_debug_mismatch();
  check_shard_write();
  compare_on_two_nodes(FSDP_TRANSPORT_MPI, "mpi");
  compare_on_two_nodes(FSDP_TRANSPORT_SHM, "shm");
  compare_on_two_nodes(FSDP_TRANSPORT_SHM_ZERO_COPY, "shm_zero_copy");
  check_meaningless(FSDP_TRANSPORT_MPI, "mpi");
  check_meaningless(FSDP_TRANSPORT_SHM_ZERO_COPY, "shm_zero_copy");
  return th_finish();
}
