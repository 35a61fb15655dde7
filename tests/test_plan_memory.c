/* The planner against the library (issue 35, item 2): for each configuration, the same model is
 * handed to a plan (fsdp_plan_add_unit, fsdp_plan_tie) and created for real in a fresh context
 * (fsdp_init with the configuration, FSDP_TRANSPORT_MPI), which then runs the training step
 * doc/planning-model.md defines: forward (unshard, reshard), backward in reverse (unshard, write
 * every gradient, reshard, reduce), one optimizer step. Every field of fsdp_plan_memory_t must
 * equal fsdp_memory_stats' after the step, exactly. Traffic is checked against what the library
 * records: its trace (FSDP_TRACE, one file per rank written at fsdp_finalize) gives each
 * all-gather's and reduce-scatter's bytes; the trace has no all-reduce span, so the all-reduce
 * bytes are derived here from the reduce-scatter spans (a partial sum is 1/F of the reduced
 * gradient; with HFSDP it is reduce-scattered across replicas instead, and each stepped unit's
 * all-gather across replicas is a "replica_all_gather" span; with hpZ backward's gathers from the
 * node's secondaries are "all_gather_node" spans), and the intra/inter-node split from
 * those spans by the ring model the plan states, with ranks per node as the library sees them
 * (FSDP_RANKS_PER_NODE emulates nodes). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

enum { MAX_UNITS = 4, MAX_PARAMS = 4, MAX_TIES = 2 };

typedef struct {
  const char* name;
  int ndim;
  int64_t shape[2];
  int requires_grad;
} Param;

typedef struct {
  const char* name;
  int nparams;
  Param params[MAX_PARAMS];
  int nties; /* ties: (alias, owner unit, owner param) */
  const char* alias[MAX_TIES];
  int owner[MAX_TIES], owner_param[MAX_TIES];
} UnitSpec;

typedef struct {
  const char* label;
  fsdp_sharding_strategy_t strategy;
  int sharding_factor; /* -1: 2 when the world size is even, else 1 */
  fsdp_dtype_t dtype, param_dtype, reduce_dtype;
  int max_unsharded;
  int no_optimizer;
  fsdp_optimizer_kind_t optimizer;
  double momentum;
  int amsgrad;
  int nunits;
  const UnitSpec* units;
  int prefetch_forward, prefetch_backward; /* with either, two steps (the plan says so) */
  int hfsdp;                               /* cfg->hfsdp (hybrid) */
  int hpz;                                 /* cfg->hpz */
} Config;

/* Odd sizes so that padding and uneven shards show. */
static const UnitSpec kMlp[] = {
    {"in", 2, {{"in.weight", 2, {17, 9}, 1}, {"in.bias", 1, {17}, 1}}, 0, {0}, {0}, {0}},
    {"mid", 2, {{"mid.weight", 2, {33, 17}, 1}, {"mid.bias", 1, {33}, 1}}, 0, {0}, {0}, {0}},
    {"out", 1, {{"out.weight", 2, {5, 33}, 1}}, 0, {0}, {0}, {0}},
};
/* An embedding reused by the head, a block with a frozen norm beside trainable weights, a frozen
 * unit, and a head whose only trainable parameter is the tie. */
static const UnitSpec kTied[] = {
    {"embed", 1, {{"embed.weight", 2, {29, 7}, 1}}, 0, {0}, {0}, {0}},
    {"block",
     3,
     {{"block.w", 2, {7, 7}, 1}, {"block.norm", 1, {7}, 0}, {"block.b", 1, {7}, 1}},
     0,
     {0},
     {0},
     {0}},
    {"frozen", 1, {{"frozen.w", 2, {11, 3}, 0}}, 0, {0}, {0}, {0}},
    {"head", 1, {{"head.scale", 1, {29}, 0}}, 1, {"head.weight"}, {0}, {0}},
};

static const Config kConfigs[] = {
    {"full shard, AdamW", FSDP_FULL_SHARD, 0, FSDP_FLOAT32, FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 0, 0,
     FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp},
    {"hybrid (F = ranks per node), bfloat16 / float32 reduce, AdamW amsgrad", FSDP_HYBRID_SHARD, 0,
     FSDP_FLOAT32, FSDP_BFLOAT16, FSDP_FLOAT32, 0, 0, FSDP_OPTIMIZER_ADAMW, 0, 1, 3, kMlp},
    {"hybrid (F = 2 or 1), SGD momentum", FSDP_HYBRID_SHARD, -1, FSDP_FLOAT32, FSDP_DTYPE_AUTO,
     FSDP_DTYPE_AUTO, 1, 0, FSDP_OPTIMIZER_SGD, 0.9, 0, 3, kMlp},
    {"no shard, bfloat16, SGD", FSDP_NO_SHARD, 0, FSDP_FLOAT32, FSDP_BFLOAT16, FSDP_DTYPE_AUTO, 2,
     0, FSDP_OPTIMIZER_SGD, 0, 0, 3, kMlp},
    {"full shard, float16 / float32 reduce, max_unsharded 1", FSDP_FULL_SHARD, 0, FSDP_FLOAT32,
     FSDP_FLOAT16, FSDP_FLOAT32, 1, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp},
    {"float64, AdamW", FSDP_FULL_SHARD, 0, FSDP_FLOAT64, FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 0, 0,
     FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp},
    {"ties and frozen parameters, SGD momentum, max_unsharded 2", FSDP_FULL_SHARD, 0, FSDP_FLOAT32,
     FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 2, 0, FSDP_OPTIMIZER_SGD, 0.5, 0, 4, kTied},
    {"ties and frozen parameters, hybrid, bfloat16, AdamW", FSDP_HYBRID_SHARD, -1, FSDP_FLOAT32,
     FSDP_BFLOAT16, FSDP_DTYPE_AUTO, 0, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 4, kTied},
    {"no optimizer, float64, no shard", FSDP_NO_SHARD, 0, FSDP_FLOAT64, FSDP_DTYPE_AUTO,
     FSDP_DTYPE_AUTO, 0, 1, FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp},
    {"prefetch, max_unsharded 1 (every prefetch skipped)", FSDP_FULL_SHARD, 0, FSDP_FLOAT32,
     FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 1, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp, 1, 1},
    {"prefetch, max_unsharded 2, bfloat16 / float32 reduce", FSDP_FULL_SHARD, 0, FSDP_FLOAT32,
     FSDP_BFLOAT16, FSDP_FLOAT32, 2, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp, 1, 1},
    {"backward prefetch, max_unsharded 3, ties, hybrid", FSDP_HYBRID_SHARD, -1, FSDP_FLOAT32,
     FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 3, 0, FSDP_OPTIMIZER_SGD, 0.9, 0, 4, kTied, 0, 1},
    {"HFSDP (F = 2 or 1), bfloat16 / float32 reduce, AdamW", FSDP_HYBRID_SHARD, -1, FSDP_FLOAT32,
     FSDP_BFLOAT16, FSDP_FLOAT32, 0, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp, 0, 0, 1},
    {"HFSDP, ties and frozen parameters, SGD momentum, prefetch", FSDP_HYBRID_SHARD, -1,
     FSDP_FLOAT32, FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 3, 0, FSDP_OPTIMIZER_SGD, 0.9, 0, 4, kTied, 1,
     1, 1},
    {"hpZ, full shard, bfloat16 / float32 reduce, AdamW", FSDP_FULL_SHARD, 0, FSDP_FLOAT32,
     FSDP_BFLOAT16, FSDP_FLOAT32, 0, 0, FSDP_OPTIMIZER_ADAMW, 0, 0, 3, kMlp, 0, 0, 0, 1},
    {"hpZ, ties and frozen parameters, prefetch, max_unsharded 3", FSDP_FULL_SHARD, 0, FSDP_FLOAT32,
     FSDP_DTYPE_AUTO, FSDP_DTYPE_AUTO, 3, 0, FSDP_OPTIMIZER_SGD, 0.9, 0, 4, kTied, 1, 1, 0, 1},
};

typedef struct {
  fsdp_param_desc_t descs[MAX_PARAMS];
} Descs;

static Descs descs_of(const UnitSpec* u, fsdp_dtype_t dtype) {
  Descs d;
  for (int i = 0; i < u->nparams; ++i) {
    const Param* p = &u->params[i];
    d.descs[i].name = p->name;
    d.descs[i].ndim = p->ndim;
    d.descs[i].shape = p->shape;
    d.descs[i].dtype = dtype;
    d.descs[i].requires_grad = p->requires_grad;
  }
  return d;
}

/* ---- The training step of doc/planning-model.md, run on real units ---- */

typedef struct {
  const Config* c;
  fsdp_unit_t units[MAX_UNITS];
  int written[MAX_UNITS], done[MAX_UNITS];
} Step;

/* Distinct tie owners of unit u, in tie order, u left out. */
static int owners(const Step* s, int u, int* out) {
  int n = 0;
  const UnitSpec* spec = &s->c->units[u];
  for (int t = 0; t < spec->nties; ++t) {
    int seen = spec->owner[t] == u;
    for (int k = 0; k < n; ++k) seen |= out[k] == spec->owner[t];
    if (!seen) out[n++] = spec->owner[t];
  }
  return n;
}

static void hold(Step* s, int u) {
  int o[MAX_TIES], n = owners(s, u, o);
  CHECK_OK(fsdp_unshard(s->units[u]));
  for (int k = 0; k < n; ++k) CHECK_OK(fsdp_unshard(s->units[o[k]]));
}

static void release(Step* s, int u) {
  int o[MAX_TIES], n = owners(s, u, o);
  CHECK_OK(fsdp_reshard(s->units[u]));
  for (int k = 0; k < n; ++k) CHECK_OK(fsdp_reshard(s->units[o[k]]));
}

static void write_grads(Step* s, int u) {
  const UnitSpec* spec = &s->c->units[u];
  void* g = NULL;
  for (int i = 0; i < spec->nparams; ++i)
    if (spec->params[i].requires_grad) {
      CHECK_OK(fsdp_grad_data(s->units[u], i, &g));
      s->written[u] = 1;
    }
  for (int t = 0; t < spec->nties; ++t)
    if (s->c->units[spec->owner[t]].params[spec->owner_param[t]].requires_grad) {
      CHECK_OK(fsdp_grad_data(s->units[u], spec->nparams + t, &g));
      s->written[spec->owner[t]] = 1;
    }
}

static void reduce_if_ready(Step* s, int u) {
  if (!s->written[u] || !s->done[u]) return;
  for (int v = 0; v < s->c->nunits; ++v)
    for (int t = 0; t < s->c->units[v].nties; ++t)
      if (s->c->units[v].owner[t] == u && !s->done[v]) return;
  s->written[u] = 0;
  CHECK_OK(fsdp_reduce_grads(s->units[u]));
}

static void training_step(Step* s, fsdp_context_t ctx) {
  const int n = s->c->nunits;
  memset(s->written, 0, sizeof s->written);
  memset(s->done, 0, sizeof s->done);
  CHECK_OK(fsdp_begin_forward(ctx));
  for (int u = 0; u < n; ++u) {
    hold(s, u);
    release(s, u);
  }
  CHECK_OK(fsdp_begin_backward(ctx));
  for (int u = n - 1; u >= 0; --u) {
    int o[MAX_TIES], no = owners(s, u, o);
    hold(s, u);
    write_grads(s, u);
    release(s, u);
    s->done[u] = 1;
    reduce_if_ready(s, u);
    for (int k = 0; k < no; ++k) reduce_if_ready(s, o[k]);
  }
}

/* ---- The trace ---- */

typedef struct {
  size_t ag_calls, ag_bytes, rs_calls, rs_bytes, ar_calls, ar_bytes, intra, inter;
  size_t rrs_calls, rrs_bytes, rag_calls, rag_bytes; /* HFSDP: across replicas */
  size_t nag_calls, nag_bytes;                       /* hpZ: inside the node */
} Traffic;

/* Sends of a ring collective over a group of n ranks whose successor is (not) on this node. */
static void ring_send(Traffic* t, size_t bytes, size_t parts, int n, int crosses) {
  if (n == 1) return;
  const size_t sent = bytes * parts * (size_t)(n - 1) / (size_t)n;
  if (crosses)
    t->inter += sent;
  else
    t->intra += sent;
}

static Traffic traced(const char* path, int F, int rpn, int hfsdp) {
  Traffic t = {0};
  const int W = th_size(), p = th_rank(), R = W / F;
  const int first = p / F * F;
  const int shard_crosses = (first + (p - first + 1) % F) / rpn != p / rpn;
  const int repl_crosses = (p % F + (p / F + 1) % R * F) / rpn != p / rpn;
  FILE* f = fopen(path, "r");
  CHECK_MSG(f != NULL, path);
  if (!f) return t;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    const char* b = strstr(line, "\"bytes\": ");
    if (!b) continue;
    const size_t bytes = (size_t)strtoull(b + 9, NULL, 10);
    if (strstr(line, "{\"name\": \"all_gather\"")) {
      ++t.ag_calls;
      t.ag_bytes += bytes;
      ring_send(&t, bytes, 1, F, shard_crosses);
    } else if (strstr(line, "{\"name\": \"reduce_scatter\"")) {
      ++t.rs_calls;
      t.rs_bytes += bytes;
      ring_send(&t, bytes, 1, F, shard_crosses);
      if (R > 1 && hfsdp) { /* the partial sum reduce-scattered across replicas */
        ++t.rrs_calls;
        t.rrs_bytes += bytes / (size_t)F;
        ring_send(&t, bytes / (size_t)F, 1, R, repl_crosses);
      } else if (R > 1) {
        ++t.ar_calls;
        t.ar_bytes += bytes / (size_t)F;
        ring_send(&t, bytes / (size_t)F, 2, R, repl_crosses);
      }
    } else if (strstr(line, "{\"name\": \"all_gather_node\"")) {
      ++t.nag_calls; /* over the shard group's rpn ranks on this node */
      t.nag_bytes += bytes;
      ring_send(&t, bytes, 1, rpn, 0);
    } else if (strstr(line, "{\"name\": \"replica_all_gather\"")) {
      ++t.rag_calls;
      t.rag_bytes += bytes;
      ring_send(&t, bytes, 1, R, repl_crosses);
    }
  }
  fclose(f);
  return t;
}

/* ---- One configuration ---- */

static void run(const Config* c, const char* trace_dir, int rpn) {
  const int W = th_size(), rank = th_rank();
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = c->strategy;
  cfg.sharding_factor = c->sharding_factor >= 0 ? c->sharding_factor : (W % 2 == 0 ? 2 : 1);
  cfg.param_dtype = c->param_dtype;
  cfg.reduce_dtype = c->reduce_dtype;
  cfg.max_unsharded = c->max_unsharded;
  cfg.transport = FSDP_TRANSPORT_MPI;
  cfg.hfsdp = c->hfsdp;
  cfg.hpz = c->hpz;
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  if (c->optimizer == FSDP_OPTIMIZER_SGD) {
    const fsdp_hyperparams_t sgd = FSDP_SGD_DEFAULTS;
    hp = sgd;
  }
  hp.momentum = c->momentum;
  hp.amsgrad = c->amsgrad;

  /* The plan. */
  fsdp_plan_t plan = NULL;
  CHECK_OK(fsdp_plan_create(&plan));
  for (int u = 0; u < c->nunits; ++u) {
    Descs d = descs_of(&c->units[u], c->dtype);
    int index = -1;
    CHECK_OK(fsdp_plan_add_unit(plan, c->units[u].name, c->units[u].nparams, d.descs, &index));
    CHECK(index == u);
  }
  for (int u = 0; u < c->nunits; ++u)
    for (int t = 0; t < c->units[u].nties; ++t)
      CHECK_OK(fsdp_plan_tie(plan, u, c->units[u].alias[t], c->units[u].owner[t],
                             c->units[u].owner_param[t], NULL));
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;
  job.config = &cfg;
  job.hyperparams = &hp;
  job.world_size = W;
  job.ranks_per_node = rpn;
  job.optimizer = c->optimizer;
  job.no_optimizer = c->no_optimizer;
  job.prefetch_forward = c->prefetch_forward;
  job.prefetch_backward = c->prefetch_backward;
  const int steps = c->prefetch_forward || c->prefetch_backward || c->hpz ? 2 : 1;
  fsdp_plan_memory_t planned = {sizeof planned};
  fsdp_plan_traffic_t moves = {sizeof moves};
  CHECK_OK(fsdp_plan_memory(plan, &job, rank, &planned));
  CHECK_OK(fsdp_plan_traffic(plan, &job, rank, &moves));

  /* The real thing. */
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  Step s;
  memset(&s, 0, sizeof s);
  s.c = c;
  for (int u = 0; u < c->nunits; ++u) {
    Descs d = descs_of(&c->units[u], c->dtype);
    CHECK_OK(fsdp_unit_create(ctx, c->units[u].nparams, d.descs, NULL, &s.units[u]));
  }
  for (int u = 0; u < c->nunits; ++u)
    for (int t = 0; t < c->units[u].nties; ++t)
      CHECK_OK(fsdp_unit_tie(s.units[u], c->units[u].alias[t], s.units[c->units[u].owner[t]],
                             c->units[u].owner_param[t], NULL));
  fsdp_optimizer_t opt = NULL;
  if (!c->no_optimizer)
    CHECK_OK(fsdp_optimizer_create(ctx, c->optimizer, &hp, c->nunits, s.units, &opt));
  CHECK_OK(fsdp_set_prefetch(ctx, c->prefetch_forward, c->prefetch_backward));
  for (int k = 0; k < steps; ++k) {
    training_step(&s, ctx);
    if (opt) CHECK_OK(fsdp_optimizer_step(opt));
  }
  fsdp_memory_stats_t m = {sizeof m};
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  int F = 0;
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));

  char what[512];
#define SAME(field)                                                                   \
  do {                                                                                \
    snprintf(what, sizeof what, "%s: " #field " planned %zu, measured %zu", c->label, \
             planned.field, m.field);                                                 \
    CHECK_MSG(planned.field == m.field, what);                                        \
  } while (0)
  SAME(shard_bytes);
  SAME(grad_shard_bytes);
  SAME(optimizer_state_bytes);
  SAME(unsharded_model_bytes);
  SAME(peak_unsharded_bytes);
  SAME(peak_full_grad_bytes);
  SAME(peak_parameter_bytes);
  SAME(pool_cached_bytes);
  SAME(scratch_bytes);
  SAME(peak_bytes);
  SAME(secondary_bytes);
  SAME(peak_secondary_bytes);
#undef SAME
  /* Not vacuous: the step held something. */
  CHECK(m.peak_unsharded_bytes > 0 && m.peak_full_grad_bytes > 0 && m.grad_shard_bytes > 0);
  /* Prefetch happened where max_unsharded allowed it, and was skipped where it did not. */
  if (c->prefetch_forward || c->prefetch_backward) {
    snprintf(what, sizeof what, "%s: prefetches started %zu, skipped %zu", c->label,
             m.prefetches_started, m.prefetches_skipped_limit);
    CHECK_MSG(c->max_unsharded == 1 ? m.prefetches_started == 0 && m.prefetches_skipped_limit > 0
                                    : m.prefetches_started > 0,
              what);
  }

  if (opt) CHECK_OK(fsdp_optimizer_destroy(&opt));
  for (int u = c->nunits - 1; u >= 0; --u) CHECK_OK(fsdp_unit_destroy(&s.units[u]));
  CHECK_OK(fsdp_finalize(&ctx)); /* writes the trace */

  char path[600];
  snprintf(path, sizeof path, "%s/fsdp-trace-rank%d.json", trace_dir, rank);
  Traffic t = traced(path, F, rpn, c->hfsdp);
  /* The trace holds every step; the plan is per step. */
  size_t* per_step[] = {&t.ag_calls,  &t.ag_bytes,  &t.rs_calls,  &t.rs_bytes,  &t.ar_calls,
                        &t.ar_bytes,  &t.intra,     &t.inter,     &t.rrs_calls, &t.rrs_bytes,
                        &t.rag_calls, &t.rag_bytes, &t.nag_calls, &t.nag_bytes};
  for (size_t k = 0; k < sizeof per_step / sizeof per_step[0]; ++k) *per_step[k] /= (size_t)steps;
#define SAME_T(field, got)                                                                       \
  do {                                                                                           \
    snprintf(what, sizeof what, "%s: " #field " planned %zu, traced %zu", c->label, moves.field, \
             (size_t)(got));                                                                     \
    CHECK_MSG(moves.field == (got), what);                                                       \
  } while (0)
  SAME_T(all_gather_calls, t.ag_calls);
  SAME_T(all_gather_bytes, t.ag_bytes);
  SAME_T(reduce_scatter_calls, t.rs_calls);
  SAME_T(reduce_scatter_bytes, t.rs_bytes);
  SAME_T(all_reduce_calls, t.ar_calls);
  SAME_T(all_reduce_bytes, t.ar_bytes);
  SAME_T(intra_node_bytes, t.intra);
  SAME_T(inter_node_bytes, t.inter);
  SAME_T(replica_reduce_scatter_calls, t.rrs_calls);
  SAME_T(replica_reduce_scatter_bytes, t.rrs_bytes);
  SAME_T(replica_all_gather_calls, t.rag_calls);
  SAME_T(replica_all_gather_bytes, t.rag_bytes);
  SAME_T(node_all_gather_calls, t.nag_calls);
  SAME_T(node_all_gather_bytes, t.nag_bytes);
#undef SAME_T
  /* HFSDP across real replicas: the optimizer state is hybrid's over R (one layout). */
  if (c->hfsdp && W / F > 1) CHECK(t.rag_calls > 0 && m.grad_shard_bytes > 0);
  CHECK(t.ag_calls + t.nag_calls == (size_t)(2 * c->nunits) + (c->units == kTied ? 2 : 0));
  /* hpZ across nodes (shard group over 2 nodes): backward's gathers stay inside the node. */
  if (c->hpz && F > rpn) CHECK(t.nag_calls > 0 && m.peak_secondary_bytes > 0);
  CHECK_OK(fsdp_plan_destroy(&plan));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_plan_memory");
  const int rpn = th_ranks_per_node();
  /* One trace folder per launch: np and emulated node size tell concurrent launches apart. */
  char dir[256];
  snprintf(dir, sizeof dir, "plan_trace.np%d.rpn%d", th_size(), rpn);
  if (th_rank() == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST) CHECK_MSG(0, dir);
  MPI_Barrier(MPI_COMM_WORLD);
  setenv("FSDP_TRACE", dir, 1);
  for (size_t k = 0; k < sizeof kConfigs / sizeof kConfigs[0]; ++k) run(&kConfigs[k], dir, rpn);
  return th_finish();
}
