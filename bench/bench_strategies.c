/* Strategies past one machine (a benchmark, not a test; issue 35, item 6): for full sharding,
 * hybrid, hybrid with HFSDP and full sharding with hpZ, the per-rank memory and the bytes a rank
 * sends to other nodes per training step, each next to what fsdp-plan (the fsdp_plan_* calls)
 * predicts for the same model and job, and the median step time.
 *
 * The model: an embedding tied to the output head and BLOCKS transformer blocks of width H
 * (qkv, proj, fc1, fc2 and their biases, a frozen layer norm), float32 masters, bfloat16
 * compute with float32 reduction, AdamW. A step is the planner's training step
 * (doc/planning-model.md): forward over the units, backward in reverse (gradients written,
 * reduced), one optimizer step. Memory is fsdp_memory_stats after the steps, the largest over
 * ranks. Bytes sent are measured from the trace (FSDP_TRACE: each collective's bytes and kind)
 * with the ring model of doc/planning-model.md, which says for each collective whose bytes leave
 * the node; the planner's figures come from the model alone.
 *
 * Run on 4 ranks as 2 nodes of 2 (FSDP_RANKS_PER_NODE=2, FSDP_TRANSPORT=mpi: the transport the
 * memory plan models). usage: bench_strategies [--out FILE.json] [--hidden H] [--blocks B] */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "fsdp.h"

enum { MAX_BLOCKS = 16, PARAMS = 7, WARMUP = 1, ITERS = 5 };

typedef struct {
  const char* label;
  fsdp_sharding_strategy_t strategy;
  int hfsdp, hpz;
} Strategy;

static const Strategy kStrategies[] = {
    {"full", FSDP_FULL_SHARD, 0, 0},
    {"hybrid", FSDP_HYBRID_SHARD, 0, 0},
    {"hybrid + HFSDP", FSDP_HYBRID_SHARD, 1, 0},
    {"full + hpZ", FSDP_FULL_SHARD, 0, 1},
};

typedef struct {
  int hidden, blocks, vocab;
  int64_t shapes[PARAMS][2];
  fsdp_param_desc_t block[PARAMS];
  int64_t embed_shape[2];
  fsdp_param_desc_t embed;
} Model;

static void describe(Model* m, int hidden, int blocks) {
  m->hidden = hidden;
  m->blocks = blocks;
  m->vocab = 8 * hidden;
  const int64_t h = hidden;
  const int64_t s[PARAMS][2] = {{3 * h, h}, {3 * h, 1}, {h, h}, {4 * h, h},
                                {4 * h, 1}, {h, 4 * h}, {h, 1}};
  static const char* names[PARAMS] = {"qkv.weight", "qkv.bias",   "proj.weight", "fc1.weight",
                                      "fc1.bias",   "fc2.weight", "ln.weight"};
  memcpy(m->shapes, s, sizeof s);
  for (int p = 0; p < PARAMS; ++p) {
    m->block[p].name = names[p];
    m->block[p].ndim = m->shapes[p][1] == 1 ? 1 : 2;
    m->block[p].shape = m->shapes[p];
    m->block[p].dtype = FSDP_FLOAT32;
    m->block[p].requires_grad = p != PARAMS - 1; /* the layer norm is frozen */
  }
  m->embed_shape[0] = m->vocab;
  m->embed_shape[1] = h;
  m->embed.name = "embed.weight";
  m->embed.ndim = 2;
  m->embed.shape = m->embed_shape;
  m->embed.dtype = FSDP_FLOAT32;
  m->embed.requires_grad = 1;
}

/* Parameter names must be unique in a context: block k's are prefixed by the unit's name in
 * fsdp_unit_options_t; the plan takes the same descriptors. */
static fsdp_config_t config_of(const Strategy* s) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = s->strategy;
  cfg.sharding_factor = s->strategy == FSDP_HYBRID_SHARD ? 2 : 0;
  cfg.param_dtype = FSDP_BFLOAT16;
  cfg.reduce_dtype = FSDP_FLOAT32;
  cfg.transport = FSDP_TRANSPORT_MPI;
  cfg.hfsdp = s->hfsdp;
  cfg.hpz = s->hpz;
  return cfg;
}

typedef struct {
  double intra, inter;
} Sent;

/* The ring model (doc/planning-model.md): a collective over a group of n sends (n-1)/n of the
 * buffer (twice for an all-reduce) to the next member, across nodes when that member is on
 * another node. Groups by kind: shard group (F consecutive positions), replicate group (the
 * positions p % F + k F), the shard group's ranks on this node (hpZ's node-local gathers). */
static Sent traced(const char* path, int F, int rpn, int hfsdp) {
  Sent t = {0, 0};
  int W = 1, p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MPI_Comm_rank(MPI_COMM_WORLD, &p);
  const int R = W / F, first = p / F * F;
  const int shard_crosses = (first + (p - first + 1) % F) / rpn != p / rpn;
  const int repl_crosses = (p % F + (p / F + 1) % R * F) / rpn != p / rpn;
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "bench_strategies: no trace at %s\n", path);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    const char* b = strstr(line, "\"bytes\": ");
    if (!b) continue;
    const double bytes = strtod(b + 9, NULL);
    double* shard_to = shard_crosses ? &t.inter : &t.intra;
    double* repl_to = repl_crosses ? &t.inter : &t.intra;
    if (strstr(line, "{\"name\": \"all_gather\"")) {
      *shard_to += floor(bytes * (F - 1) / F);
    } else if (strstr(line, "{\"name\": \"reduce_scatter\"")) {
      *shard_to += floor(bytes * (F - 1) / F);
      if (R > 1) *repl_to += floor(bytes / F * (hfsdp ? 1 : 2) * (R - 1) / R);
    } else if (strstr(line, "{\"name\": \"all_gather_node\"")) {
      t.intra += floor(bytes * (rpn - 1) / rpn); /* hpZ: over the node's part of the group */
    } else if (strstr(line, "{\"name\": \"replica_all_gather\"")) {
      *repl_to += floor(bytes * (R - 1) / R);
    }
  }
  fclose(f);
  return t;
}

typedef struct {
  double grad_shards, optimizer, shards, peak, step_s;
  double planned_grad_shards, planned_optimizer, planned_peak;
  Sent sent, planned;
} Result;

static void unit_options(fsdp_unit_options_t* o, char* name, size_t cap, int k) {
  *o = (fsdp_unit_options_t)FSDP_UNIT_OPTIONS_INIT;
  snprintf(name, cap, "block%d", k);
  o->name = name;
}

static Result run(const Model* m, const Strategy* s, const char* trace_dir, int rpn) {
  int W = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const fsdp_config_t cfg = config_of(s);
  const int n = m->blocks + 2; /* embed, blocks, head (the tied embedding) */
  Result r;
  memset(&r, 0, sizeof r);

  /* The plan: block parameter names need not be unique there; the head only ties. */
  fsdp_plan_t plan = NULL;
  TRY(fsdp_plan_create(&plan));
  TRY(fsdp_plan_add_unit(plan, "embed", 1, &m->embed, NULL));
  for (int k = 0; k < m->blocks; ++k)
    TRY(fsdp_plan_add_unit(plan, "block", PARAMS, m->block, NULL));
  const int64_t one[1] = {1};
  const fsdp_param_desc_t scale = {"head.scale", 1, one, FSDP_FLOAT32, 0};
  TRY(fsdp_plan_add_unit(plan, "head", 1, &scale, NULL));
  TRY(fsdp_plan_tie(plan, n - 1, "head.weight", 0, 0, NULL));
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;
  job.config = &cfg;
  job.world_size = W;
  job.ranks_per_node = rpn;
  fsdp_plan_memory_t pm = {sizeof pm};
  fsdp_plan_traffic_t pt = {sizeof pt};
  TRY(fsdp_plan_memory(plan, &job, rank, &pm));
  TRY(fsdp_plan_traffic(plan, &job, rank, &pt));
  TRY(fsdp_plan_destroy(&plan));

  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  fsdp_unit_t u[MAX_BLOCKS + 2];
  fsdp_unit_options_t o;
  char name[32];
  TRY(fsdp_unit_create(ctx, 1, &m->embed, NULL, &u[0]));
  /* Unique names in the context: the blocks' parameters carry their block's prefix. */
  for (int k = 0; k < m->blocks; ++k) {
    fsdp_param_desc_t d[PARAMS];
    char names[PARAMS][48];
    for (int p = 0; p < PARAMS; ++p) {
      d[p] = m->block[p];
      snprintf(names[p], sizeof names[p], "block%d.%s", k, m->block[p].name);
      d[p].name = names[p];
    }
    unit_options(&o, name, sizeof name, k);
    TRY(fsdp_unit_create_ex(ctx, PARAMS, d, NULL, &o, &u[1 + k]));
  }
  TRY(fsdp_unit_create(ctx, 1, &scale, NULL, &u[n - 1]));
  int alias = -1;
  TRY(fsdp_unit_tie(u[n - 1], "head.weight", u[0], 0, &alias));
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  fsdp_optimizer_t opt = NULL;
  TRY(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &hp, n, u, &opt));

  double times[ITERS];
  for (int it = 0; it < WARMUP + ITERS; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    TRY(fsdp_begin_forward(ctx));
    TRY(fsdp_unshard(u[0])); /* forward: the embedding, each block, the head (with the tie) */
    TRY(fsdp_reshard(u[0]));
    for (int k = 1; k < n - 1; ++k) {
      TRY(fsdp_unshard(u[k]));
      TRY(fsdp_reshard(u[k]));
    }
    TRY(fsdp_unshard(u[n - 1]));
    TRY(fsdp_unshard(u[0]));
    TRY(fsdp_reshard(u[n - 1]));
    TRY(fsdp_reshard(u[0]));
    TRY(fsdp_begin_backward(ctx));
    void* g = NULL;
    TRY(fsdp_unshard(u[n - 1])); /* backward: the head writes the tied embedding's gradient */
    TRY(fsdp_unshard(u[0]));
    TRY(fsdp_grad_data(u[n - 1], alias, &g));
    TRY(fsdp_reshard(u[n - 1]));
    TRY(fsdp_reshard(u[0]));
    for (int k = n - 2; k >= 1; --k) {
      TRY(fsdp_unshard(u[k]));
      for (int p = 0; p < PARAMS - 1; ++p) TRY(fsdp_grad_data(u[k], p, &g));
      TRY(fsdp_reshard(u[k]));
      TRY(fsdp_reduce_grads(u[k]));
    }
    TRY(fsdp_unshard(u[0]));
    TRY(fsdp_grad_data(u[0], 0, &g));
    TRY(fsdp_reshard(u[0]));
    TRY(fsdp_reduce_grads(u[0]));
    TRY(fsdp_optimizer_step(opt));
    TRY(fsdp_optimizer_zero_grad(opt));
    const double dt = MPI_Wtime() - t0;
    double slowest = 0.0;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= WARMUP) times[it - WARMUP] = slowest;
  }
  r.step_s = median(times, ITERS);
  fsdp_memory_stats_t ms = {sizeof ms};
  TRY(fsdp_memory_stats(ctx, &ms));
  int F = 0;
  TRY(fsdp_context_config(ctx, &F, NULL, NULL));
  TRY(fsdp_optimizer_destroy(&opt));
  for (int k = n - 1; k >= 0; --k) TRY(fsdp_unit_destroy(&u[k]));
  TRY(fsdp_finalize(&ctx)); /* writes the trace */

  char path[512];
  snprintf(path, sizeof path, "%s/fsdp-trace-rank%d.json", trace_dir, rank);
  Sent sent = traced(path, F, rpn, s->hfsdp);
  const double steps = WARMUP + ITERS;
  sent.intra /= steps;
  sent.inter /= steps;
  /* The largest over ranks of each figure, measured and planned. */
  double mine[10] = {(double)ms.grad_shard_bytes, (double)ms.optimizer_state_bytes,
                     (double)ms.shard_bytes,      (double)ms.peak_bytes,
                     (double)pm.grad_shard_bytes, (double)pm.optimizer_state_bytes,
                     (double)pm.peak_bytes,       sent.inter,
                     (double)pt.inter_node_bytes, sent.intra};
  double most[10];
  MPI_Allreduce(mine, most, 10, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.grad_shards = most[0];
  r.optimizer = most[1];
  r.shards = most[2];
  r.peak = most[3];
  r.planned_grad_shards = most[4];
  r.planned_optimizer = most[5];
  r.planned_peak = most[6];
  r.sent.inter = most[7];
  r.planned.inter = most[8];
  r.sent.intra = most[9];
  return r;
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, W = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  const char* out = NULL;
  int hidden = 512, blocks = 4;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidden = atoi(argv[++i]);
    if (!strcmp(argv[i], "--blocks") && i + 1 < argc) blocks = atoi(argv[++i]);
  }
  if (blocks < 1 || blocks > MAX_BLOCKS || hidden < 8) {
    if (rank == 0) fprintf(stderr, "bench_strategies: --blocks 1..%d, --hidden >= 8\n", MAX_BLOCKS);
    MPI_Finalize();
    return 2;
  }
  const char* rpn_env = getenv("FSDP_RANKS_PER_NODE");
  const int rpn = rpn_env ? atoi(rpn_env) : W;
  if (rpn < 1 || W % rpn != 0 || W / rpn < 2) {
    if (rank == 0)
      fprintf(stderr,
              "bench_strategies: needs at least 2 nodes (FSDP_RANKS_PER_NODE=%d, %d ranks)\n", rpn,
              W);
    MPI_Finalize();
    return 2;
  }
  /* One trace folder for the run, made by rank 0 and shared. */
  char dir[64] = "";
  if (rank == 0) {
    snprintf(dir, sizeof dir, "/tmp/fsdp-bench-strategies-XXXXXX");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!dir[0]) MPI_Abort(MPI_COMM_WORLD, 1);
  setenv("FSDP_TRACE", dir, 1);

  Model m;
  describe(&m, hidden, blocks);
  const double MiB = 1024.0 * 1024.0;
  FILE* json = rank == 0 && out ? fopen(out, "w") : NULL;
  if (json)
    fprintf(json,
            "{\"ranks\": %d, \"ranks_per_node\": %d, \"hidden\": %d, \"blocks\": %d, "
            "\"strategies\": [",
            W, rpn, hidden, blocks);
  if (rank == 0) {
    printf(
        "Strategies on %d ranks as %d nodes of %d: a tied embedding and %d blocks of width %d,"
        " bfloat16 compute, float32 reduce, AdamW; per rank (largest over ranks), measured and"
        " planned (fsdp-plan)\n\n",
        W, W / rpn, rpn, blocks, hidden);
    printf(
        "| strategy | shards MiB | grad shards MiB (planned) | optimizer MiB (planned) |"
        " peak MiB (planned) | inter-node MiB/step (planned) | intra-node MiB/step |"
        " step ms |\n|---|---|---|---|---|---|---|---|\n");
  }
  for (size_t k = 0; k < sizeof kStrategies / sizeof kStrategies[0]; ++k) {
    const Result r = run(&m, &kStrategies[k], dir, rpn);
    if (rank != 0) continue;
    printf("| %s | %.2f | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) | %.3f (%.3f) | %.3f | %.1f |\n",
           kStrategies[k].label, r.shards / MiB, r.grad_shards / MiB, r.planned_grad_shards / MiB,
           r.optimizer / MiB, r.planned_optimizer / MiB, r.peak / MiB, r.planned_peak / MiB,
           r.sent.inter / MiB, r.planned.inter / MiB, r.sent.intra / MiB, r.step_s * 1e3);
    if (json)
      fprintf(json,
              "%s{\"strategy\": \"%s\", \"shard_bytes\": %.0f, \"grad_shard_bytes\": %.0f, "
              "\"planned_grad_shard_bytes\": %.0f, \"optimizer_state_bytes\": %.0f, "
              "\"planned_optimizer_state_bytes\": %.0f, \"peak_bytes\": %.0f, "
              "\"planned_peak_bytes\": %.0f, \"inter_node_bytes_per_step\": %.0f, "
              "\"planned_inter_node_bytes\": %.0f, \"intra_node_bytes_per_step\": %.0f, "
              "\"step_s\": %.6f}",
              k ? ", " : "", kStrategies[k].label, r.shards, r.grad_shards, r.planned_grad_shards,
              r.optimizer, r.planned_optimizer, r.peak, r.planned_peak, r.sent.inter,
              r.planned.inter, r.sent.intra, r.step_s);
  }
  if (json) {
    fprintf(json, "]}\n");
    fclose(json);
  }
  if (rank == 0) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_strategies: could not remove %s\n", dir);
  }
  MPI_Finalize();
  return 0;
}
