/* Prefetch is a hint the caller never sees (doc/training.md, "Prefetch").
 *
 * The loops real programs run, each with prefetch off (the reference) and on (also with a larger
 * max_unsharded, and with debug mode verifying every collective across ranks):
 *   - an evaluation pass (forward without backward) before the training step, without and with
 *     its own fsdp_begin_forward (the port of a C GPT-2 trainer that found the defect);
 *   - a chunked loss: the last unit used again on its own after the full forward;
 *   - a state dict between backward and the optimizer step (every unit unsharded and read);
 *   - long random sequences of legal calls: unshard/reshard/reduce in varying orders, synchronous
 *     and asynchronous, evaluation passes, begin_* calls, optimizer steps, zeroing, accumulation
 *     (gradient sync turned off and on), gradient clipping, and checkpoint saves and loads; the
 *     last unit computes in bfloat16.
 * The model also has units used by any subset of ranks (FSDP_USED_BY_ANY_RANKS). In the random loop
 * each rank decides on its own, from a stream of its own, whether to unshard, read, write gradients
 * for, reduce or reshard them, between the collective calls every rank makes alike; each step
 * starts with fsdp_step_boundary on every rank. Every rank replays every rank's decisions, so it
 * knows the gradients each wrote: the reference of those units (the mean over the ranks of what
 * they wrote, torch.optim.SGD's momentum, a unit nobody wrote skipped) is computed here, and every
 * read of them (by a rank alone, after a step while the others go on, by every rank at the end)
 * must give it.
 * Every call must succeed; what the caller reads and the final shards must be bitwise identical to
 * the prefetch-off run; after every fsdp_begin_forward/fsdp_begin_backward and optimizer step where
 * the caller holds no unit, the library holds no unsharded parameters; and at the end every
 * prefetch started was either used or released (fsdp_memory_stats). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "precision_ref.h"

/* Units 0..NU-1 every rank uses (the collective calls); NU..NT-1 any subset of ranks uses. */
enum { NU = 5, NA = 2, NT = NU + NA, NP = 2, BF16_UNIT = NU - 1 };
enum { MAXN = 128 }; /* numel_of's largest, rounded up */
static const double kLr = 0.05, kMomentum = 0.9;
/* float32 parameters against the reference in double (they differ by under 3e-7 here); a read of
 * the values before a step is off by kLr times the momentum, about 1e-3 */
static const double kAnyTolerance = 2e-5;

static char ckpt_dir[64]; /* the random loop's checkpoints */

static float bf16_to_float(uint16_t h) {
  return (float)ref_decode(h, REF_BF16);
}

static uint16_t float_to_bf16(float f) { /* the library's rounding: the same in every run */
  uint16_t b = 0;
  CHECK_OK(fsdp_convert(&b, FSDP_BFLOAT16, &f, FSDP_FLOAT32, 1));
  return b;
}

/* One rank's use of the units used by any subset of ranks. */
typedef struct {
  uint64_t s;    /* its own stream: its decisions about those units */
  int held[NA];  /* unsharded by this rank */
  int wrote[NA]; /* it wrote a gradient (fsdp_grad_data) since the last step */
  int writes;    /* gradient writes so far: which values the next one adds */
} any_rank_t;

/* Those units as they must be, from every rank's decisions (PyTorch's SGD with momentum, the
 * gradients averaged over the ranks as FSDP_REDUCE_MEAN averages them). */
typedef struct {
  double param[NA][NP][MAXN];
  double momentum[NA][NP][MAXN];
  double grad[NA][NP][MAXN]; /* the sum over the ranks of what they wrote since the last step */
  int has_momentum[NA];      /* the buffer exists (from the first gradient) */
  int has_grad[NA];          /* some rank wrote since the last step: else the step skips it */
} reference_t;

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t u[NT]; /* u[NU + a]: unit a of those any subset of ranks uses */
  fsdp_optimizer_t opt;
  double acc; /* everything the caller read, folded in a fixed order */
  int held[NU], written[NU];
  int sync_off; /* fsdp_set_grad_sync(ctx, 0) in force: reductions accumulate */
  fsdp_request_t unshard_req[NU], reduce_req[NU];
  /* th_zero_copy, asked once: it communicates over MPI_COMM_WORLD, which a rank must not do while
   * its update phase is open and a peer may be waiting to read its shards (see step) */
  int zero_copy;
  any_rank_t* ranks; /* every rank's, by rank; this rank's calls follow ranks[th_rank()] */
  fsdp_request_t any_unshard_req[NA], any_reduce_req[NA];
  reference_t ref;
} model_t;

static int64_t numel_of(int k, int i) {
  return i == 0 ? 37 + 11 * k : 64;
}

static void initial_values(int k, int i, float* v) {
  uint64_t s = (uint64_t)(k * NP + i) * 7919u + 17u;
  for (int64_t e = 0; e < numel_of(k, i); ++e) v[e] = (float)(th_uniform(&s) - 0.5);
}

static void build(model_t* m, int prefetch, int max_unsharded, int debug) {
  memset(m, 0, sizeof *m);
  m->ranks = calloc((size_t)th_size(), sizeof *m->ranks);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  if (max_unsharded) cfg.max_unsharded = max_unsharded;
  cfg.debug_collectives = debug;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &m->ctx));
  for (int k = 0; k < NT; ++k) {
    int64_t n[NP];
    fsdp_param_desc_t d[NP];
    float* v[NP];
    char names[NP][16];
    for (int i = 0; i < NP; ++i) {
      n[i] = numel_of(k, i);
      snprintf(names[i], sizeof names[i], "u%d.p%d", k, i);
      d[i].name = names[i];
      d[i].ndim = 1;
      d[i].shape = &n[i];
      d[i].dtype = FSDP_FLOAT32;
      d[i].requires_grad = 1;
      v[i] = malloc((size_t)n[i] * sizeof(float));
      initial_values(k, i, v[i]);
      if (k >= NU)
        for (int64_t e = 0; e < n[i]; ++e) m->ref.param[k - NU][i][e] = v[i][e];
    }
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    if (k == BF16_UNIT) o.param_dtype = FSDP_BFLOAT16;
    if (k >= NU) o.used_by = FSDP_USED_BY_ANY_RANKS;
    CHECK_OK(fsdp_unit_create_ex(m->ctx, NP, d, (const void* const*)v, &o, &m->u[k]));
    for (int i = 0; i < NP; ++i) free(v[i]);
  }
  fsdp_hyperparams_t hp = FSDP_SGD_DEFAULTS;
  hp.lr = kLr;
  hp.momentum = kMomentum;
  CHECK_OK(fsdp_optimizer_create(m->ctx, FSDP_OPTIMIZER_SGD, &hp, NT, m->u, &m->opt));
  CHECK_OK(fsdp_set_prefetch(m->ctx, prefetch, prefetch));
  m->zero_copy = th_zero_copy(m->ctx);
}

/* ---- The caller's operations (each legal in the state the model tracks) ---- */

static void unshard(model_t* m, int k, int async) {
  if (async)
    CHECK_OK(fsdp_unshard_async(m->u[k], &m->unshard_req[k]));
  else
    CHECK_OK(fsdp_unshard(m->u[k]));
  m->held[k] = 1;
}

static void read_params(model_t* m, int k) {
  for (int i = 0; i < NP; ++i) {
    void* p = NULL;
    CHECK_OK(fsdp_param_data(m->u[k], i, &p));
    if (!p) return;
    double s = 0.0;
    for (int64_t e = 0; e < numel_of(k, i); ++e)
      s += (k == BF16_UNIT ? bf16_to_float(((uint16_t*)p)[e]) : ((float*)p)[e]) *
           (double)(e % 5 + 1);
    m->acc = m->acc * 0.5 + s;
  }
}

static void reshard(model_t* m, int k) {
  if (m->unshard_req[k]) CHECK_OK(fsdp_wait(&m->unshard_req[k]));
  CHECK_OK(fsdp_reshard(m->u[k]));
  m->held[k] = 0;
}

/* A gradient that depends on what was read: adds into the full gradient, rank-dependent. */
static void write_grads(model_t* m, int k) {
  const double f = m->acc - floor(m->acc);
  for (int i = 0; i < NP; ++i) {
    void* g = NULL;
    CHECK_OK(fsdp_grad_data(m->u[k], i, &g));
    if (!g) return;
    for (int64_t e = 0; e < numel_of(k, i); ++e) {
      const float d = (float)(0.01 * (double)(e % 7) - 0.02 + 0.1 * f + 0.003 * th_rank());
      if (k == BF16_UNIT)
        ((uint16_t*)g)[e] = float_to_bf16(bf16_to_float(((uint16_t*)g)[e]) + d);
      else
        ((float*)g)[e] += d;
    }
  }
  m->written[k] = 1;
}

static void reduce(model_t* m, int k, int async) {
  if (m->reduce_req[k]) CHECK_OK(fsdp_wait(&m->reduce_req[k]));
  if (async)
    CHECK_OK(fsdp_reduce_grads_async(m->u[k], &m->reduce_req[k]));
  else
    CHECK_OK(fsdp_reduce_grads(m->u[k]));
  m->written[k] = m->sync_off; /* without sync the gradient is kept for the next micro-batch */
}

static void wait_reductions(model_t* m) {
  for (int k = 0; k < NU; ++k)
    if (m->reduce_req[k]) CHECK_OK(fsdp_wait(&m->reduce_req[k]));
}

static uint64_t next_random(uint64_t* s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* ---- The units used by any subset of ranks: each rank's own calls ---- */

/* The values rank r's n-th gradient write adds (known to every rank: the reference sums them). */
static float any_grad(int r, int n, int a, int i, int64_t e) {
  uint64_t h = (((uint64_t)r * 1000003u + (uint64_t)n) * 131u + (uint64_t)(a * NP + i)) * 4099u +
               (uint64_t)e;
  return (float)(0.05 * th_uniform(&h) + 0.01 * (r + 1));
}

/* Unit a as this rank reads it must be the reference. */
static void any_check(model_t* m, int a, const char* when) {
  double worst = 0.0;
  int missing = 0;
  for (int i = 0; i < NP; ++i) {
    const float* p = NULL;
    CHECK_OK(fsdp_param_data(m->u[NU + a], i, (void**)&p));
    missing += !p;
    for (int64_t e = 0; p && e < numel_of(NU + a, i); ++e)
      worst = fmax(worst, fabs((double)p[e] - m->ref.param[a][i][e]));
  }
  char msg[200];
  snprintf(msg, sizeof msg,
           "%s: unit %d (used by any subset of ranks) read by rank %d differs from the reference "
           "by %g",
           when, NU + a, th_rank(), worst);
  CHECK_MSG(!missing && worst <= kAnyTolerance, msg);
}

static void any_unshard(model_t* m, int a, int async) {
  if (async)
    CHECK_OK(fsdp_unshard_async(m->u[NU + a], &m->any_unshard_req[a]));
  else
    CHECK_OK(fsdp_unshard(m->u[NU + a]));
}

static void any_reshard(model_t* m, int a) {
  if (m->any_unshard_req[a]) CHECK_OK(fsdp_wait(&m->any_unshard_req[a]));
  CHECK_OK(fsdp_reshard(m->u[NU + a]));
}

/* Local: the gradient stays on the rank (and later writes add to it) until the step boundary. */
static void any_reduce(model_t* m, int a, int async) {
  if (m->any_reduce_req[a]) CHECK_OK(fsdp_wait(&m->any_reduce_req[a]));
  if (async)
    CHECK_OK(fsdp_reduce_grads_async(m->u[NU + a], &m->any_reduce_req[a]));
  else
    CHECK_OK(fsdp_reduce_grads(m->u[NU + a]));
}

/* Rank r adds its next gradient values into unit a; this rank writes them if it is r. */
static void any_write(model_t* m, int r, int a) {
  any_rank_t* v = &m->ranks[r];
  const int n = v->writes++;
  for (int i = 0; i < NP; ++i) {
    float* g = NULL;
    if (r == th_rank()) {
      CHECK_OK(fsdp_grad_data(m->u[NU + a], i, (void**)&g));
      if (!g) return;
    }
    for (int64_t e = 0; e < numel_of(NU + a, i); ++e) {
      const float d = any_grad(r, n, a, i, e);
      if (g) g[e] += d;
      m->ref.grad[a][i][e] += d;
    }
  }
  v->wrote[a] = 1;
  m->ref.has_grad[a] = 1;
}

/* One decision of rank r, from r's own stream, between two of the calls every rank makes alike.
 * Every rank takes every rank's decisions (the same ones: each stream depends only on the seed and
 * its rank) and makes the calls of its own. */
static void any_rank_op(model_t* m, int r) {
  any_rank_t* v = &m->ranks[r];
  const int mine = r == th_rank();
  const int a = (int)(next_random(&v->s) % NA), async = (int)(next_random(&v->s) % 2);
  switch (next_random(&v->s) % 10) {
    case 0:
    case 1: /* unshard (alone: nobody else takes part) and read */
      if (!v->held[a]) {
        if (mine) any_unshard(m, a, async);
        v->held[a] = 1;
      }
      if (mine) any_check(m, a, "a read by one rank on its own");
      break;
    case 2: /* a gradient, mostly while unsharded as a backward pass writes it */
      if (v->held[a] || next_random(&v->s) % 4 == 0) any_write(m, r, a);
      break;
    case 3:
      if (v->held[a]) {
        if (mine) any_reshard(m, a);
        v->held[a] = 0;
      }
      break;
    case 4:
      if (v->wrote[a] && mine) any_reduce(m, a, async);
      break;
    default: /* mostly: this rank leaves them alone */ break;
  }
}

/* Before a step or a checkpoint, rank r reshards what it holds (and before a step reduces, or
 * not, what it wrote: the boundary reduces it either way). */
static void any_rank_settle(model_t* m, int r, int for_step) {
  any_rank_t* v = &m->ranks[r];
  const int mine = r == th_rank();
  for (int a = 0; a < NA; ++a) {
    if (v->held[a]) {
      if (mine) any_reshard(m, a);
      v->held[a] = 0;
    }
    if (for_step && v->wrote[a] && next_random(&v->s) % 2 && mine) any_reduce(m, a, 0);
    if (mine && m->any_reduce_req[a]) CHECK_OK(fsdp_wait(&m->any_reduce_req[a]));
  }
}

/* The optimizer step of the reference: each unit some rank wrote a gradient for. */
static void any_reference_step(model_t* m) {
  reference_t* ref = &m->ref;
  for (int a = 0; a < NA; ++a) {
    if (!ref->has_grad[a]) continue; /* no gradient on any rank: skipped, momentum kept */
    for (int i = 0; i < NP; ++i)
      for (int64_t e = 0; e < numel_of(NU + a, i); ++e) {
        const double g = ref->grad[a][i][e] / th_size(); /* FSDP_REDUCE_MEAN */
        double* b = &ref->momentum[a][i][e];
        *b = ref->has_momentum[a] ? kMomentum * *b + g : g;
        ref->param[a][i][e] -= kLr * *b;
        ref->grad[a][i][e] = 0.0;
      }
    ref->has_momentum[a] = 1;
    ref->has_grad[a] = 0;
  }
  for (int r = 0; r < th_size(); ++r) memset(m->ranks[r].wrote, 0, sizeof m->ranks[r].wrote);
}

/* One rank (a choice every rank makes alike) reads a unit alone, the others going on. */
static void any_read_alone(model_t* m, uint64_t* shared, const char* when) {
  const int reader = (int)(next_random(shared) % (uint64_t)th_size());
  const int a = (int)(next_random(shared) % NA);
  if (reader != th_rank() || m->ranks[reader].held[a]) return;
  any_unshard(m, a, 0);
  any_check(m, a, when);
  any_reshard(m, a);
}

/* Where the caller holds no unit, the library holds no unsharded parameters either. (Where it
 * holds some, a pooled buffer may be larger than the unit it serves: not compared.) */
static void check_nothing_stranded(model_t* m, const char* where) {
  for (int k = 0; k < NU; ++k)
    if (m->held[k]) return;
  for (int a = 0; a < NA; ++a)
    if (m->ranks[th_rank()].held[a]) return;
  fsdp_memory_stats_t s;
  s.size = sizeof s;
  CHECK_OK(fsdp_memory_stats(m->ctx, &s));
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %zu unsharded bytes held where the caller holds no unit", where,
           s.unsharded_bytes);
  CHECK_MSG(s.unsharded_bytes == 0, msg);
}

static void begin_forward(model_t* m) {
  CHECK_OK(fsdp_begin_forward(m->ctx));
  check_nothing_stranded(m, "after fsdp_begin_forward");
}

static void begin_backward(model_t* m) {
  CHECK_OK(fsdp_begin_backward(m->ctx));
  check_nothing_stranded(m, "after fsdp_begin_backward");
}

static void step(model_t* m) {
  if (m->sync_off) { /* the accumulation's last micro-batch communicates */
    CHECK_OK(fsdp_set_grad_sync(m->ctx, 1));
    m->sync_off = 0;
  }
  for (int k = 0; k < NU; ++k) {
    if (m->held[k]) reshard(m, k);
    if (m->written[k]) reduce(m, k, 0);
    if (m->reduce_req[k]) CHECK_OK(fsdp_wait(&m->reduce_req[k]));
  }
  for (int r = 0; r < th_size(); ++r) any_rank_settle(m, r, 1);
  /* Every rank, whether it used the units of any subset of ranks or not: their gradients are
   * reduced here. It also ends each rank's update phase of the last step before it waits for the
   * others, which the barrier below would not: a rank holding its phase open in MPI_Barrier would
   * keep a peer's read of its shards waiting, and the peer out of the barrier. */
  CHECK_OK(fsdp_step_boundary(m->ctx));
  /* Zero-copy storage: shards are written in place in the node's copy, so no rank of the node may
   * still read a unit (doc/shared-memory.md); the reads here may follow the last reductions. */
  if (m->zero_copy) MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fsdp_optimizer_step(m->opt));
  check_nothing_stranded(m, "after fsdp_optimizer_step");
  CHECK_OK(fsdp_optimizer_zero_grad(m->opt));
  any_reference_step(m);
}

static void forward(model_t* m) {
  for (int k = 0; k < NU; ++k) {
    unshard(m, k, 0);
    read_params(m, k);
    reshard(m, k);
  }
}

static void backward(model_t* m) {
  for (int k = NU - 1; k >= 0; --k) {
    unshard(m, k, 0);
    read_params(m, k);
    write_grads(m, k);
    reshard(m, k);
    reduce(m, k, 1);
  }
}

/* ---- The loops ---- */

enum { EVAL_UNMARKED, EVAL_MARKED, CHUNKED_LOSS, STATE_DICT, RANDOM, LOOPS };
static const char* loop_names[LOOPS] = {"evaluation pass", "evaluation pass after begin_forward",
                                        "chunked loss", "state dict between backward and step",
                                        "random calls"};

static void run_structured(model_t* m, int loop) {
  for (int it = 0; it < 6; ++it) {
    if (it % 2 == 0 && (loop == EVAL_UNMARKED || loop == EVAL_MARKED)) {
      if (loop == EVAL_MARKED) begin_forward(m);
      forward(m); /* no backward */
    }
    begin_forward(m);
    forward(m);
    if (loop == CHUNKED_LOSS) { /* the last unit (a norm, a head) again, on its own */
      unshard(m, NU - 1, 0);
      read_params(m, NU - 1);
      reshard(m, NU - 1);
    }
    begin_backward(m);
    backward(m);
    if (loop == STATE_DICT) {
      for (int k = 0; k < NU; ++k) { /* full state dict: every unit, in order */
        unshard(m, k, 0);
        read_params(m, k);
        reshard(m, k);
      }
    }
    step(m);
  }
}

/* Gradient clipping: a norm over every gradient shard (collective), folded into what was read. */
static void clip(model_t* m) {
  wait_reductions(m);
  double norm = 0.0;
  CHECK_OK(fsdp_clip_grad_norm(m->ctx, 0.5, 2.0, &norm));
  m->acc = m->acc * 0.5 + norm;
}

/* A checkpoint saved and loaded back between phases (units resharded, reductions done first): the
 * load gives back what was saved, so the run continues unchanged. */
static void checkpoint_round_trip(model_t* m) {
  for (int k = 0; k < NU; ++k) {
    if (m->held[k]) reshard(m, k);
    if (m->written[k] && !m->sync_off) reduce(m, k, 0);
  }
  wait_reductions(m);
  /* The load refuses unsharded units; the gradients the units of any subset of ranks keep for the
   * next boundary stay (a load writes parameters and optimizer state only). */
  for (int r = 0; r < th_size(); ++r) any_rank_settle(m, r, 0);
  char path[128];
  snprintf(path, sizeof path, "%s/random.h5", ckpt_dir);
  const fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  CHECK_OK(fsdp_checkpoint_save(m->ctx, path, &o));
  /* After the save, which ended every rank's update phase (see step), before the load writes. */
  if (m->zero_copy) MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fsdp_checkpoint_load(m->ctx, path, &o, NULL));
  check_nothing_stranded(m, "after a checkpoint save and load");
}

/* The same seed on every rank: every rank makes the same collective calls. Each rank's calls on the
 * units any subset of ranks uses follow its own stream, seeded by the seed and the rank. */
static void run_random(model_t* m, uint64_t seed) {
  uint64_t s = seed;
  uint64_t readers = seed ^ 0x2545f4914f6cdd1dull; /* which rank reads alone after a step */
  for (int r = 0; r < th_size(); ++r)
    m->ranks[r].s = (seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(r + 1))) | 1u;
  for (int op = 0; op < 400; ++op) {
    for (int r = 0; r < th_size(); ++r) any_rank_op(m, r);
    const int k = (int)(next_random(&s) % NU), async = (int)(next_random(&s) % 2);
    switch (next_random(&s) % 15) {
      case 0: begin_forward(m); break;
      case 1: begin_backward(m); break;
      case 2:
      case 3:
      case 4: /* mostly the forward order, so that prefetch has an order to follow */
        if (!m->held[k]) unshard(m, k, async);
        read_params(m, k);
        break;
      case 5:
        if (!m->held[k]) unshard(m, k, async);
        break;
      case 6:
      case 7:
        if (m->held[k]) reshard(m, k);
        break;
      case 8: write_grads(m, k); break;
      case 9:
        if (m->written[k]) reduce(m, k, async);
        break;
      case 10:
        if (next_random(&s) % 3 == 0) {
          step(m);
          any_read_alone(m, &readers, "after a step, read by one rank while the others go on");
        }
        break;
      case 11: clip(m); break;
      case 12: /* accumulation: gradient sync off (reductions keep the gradient), or on again */
        m->sync_off = !m->sync_off;
        CHECK_OK(fsdp_set_grad_sync(m->ctx, !m->sync_off));
        break;
      case 13:
        if (next_random(&s) % 4 == 0) checkpoint_round_trip(m);
        break;
      default: /* a whole pass, forward or backward order */
        for (int j = 0; j < NU; ++j)
          if (m->held[j]) reshard(m, j);
        if (next_random(&s) % 2) {
          forward(m);
        } else {
          backward(m);
        }
        break;
    }
  }
  step(m);
  any_read_alone(m, &readers, "after the last step, read by one rank while the others go on");
}

typedef struct {
  double acc;
  float* shards[NT];
  size_t n[NT];
} result_t;

static void collect(model_t* m, result_t* r) {
  r->acc = m->acc;
  for (int k = 0; k < NT; ++k) {
    float* sh = NULL;
    CHECK_OK(fsdp_shard_data(m->u[k], (void**)&sh, &r->n[k]));
    r->shards[k] = malloc(r->n[k] * sizeof(float) + 1);
    if (sh) memcpy(r->shards[k], sh, r->n[k] * sizeof(float));
  }
}

static void release(result_t* r) {
  for (int k = 0; k < NT; ++k) free(r->shards[k]);
}

static void finish(model_t* m, int prefetch, int loop, const char* label) {
  fsdp_memory_stats_t s;
  s.size = sizeof s;
  CHECK_OK(fsdp_memory_stats(m->ctx, &s));
  char msg[200];
  snprintf(msg, sizeof msg, "%s: prefetches started %zu == used %zu + unused %zu", label,
           s.prefetches_started, s.prefetches_used, s.prefetches_unused);
  CHECK_MSG(s.prefetches_started == s.prefetches_used + s.prefetches_unused, msg);
  if (!prefetch) {
    CHECK(s.prefetches_started == 0 && s.prefetches_skipped_limit == 0);
  } else if (loop != RANDOM) { /* a random sequence may never follow its last order */
    snprintf(msg, sizeof msg, "%s: prefetch ran (started %zu, used %zu)", label,
             s.prefetches_started, s.prefetches_used);
    CHECK_MSG(s.prefetches_started > 0 && s.prefetches_used > 0, msg);
  }
  CHECK_OK(fsdp_optimizer_destroy(&m->opt));
  for (int k = 0; k < NT; ++k) CHECK_OK(fsdp_unit_destroy(&m->u[k]));
  CHECK_OK(fsdp_finalize(&m->ctx));
  free(m->ranks);
}

static void run(int loop, uint64_t seed, int prefetch, int max_unsharded, int debug, result_t* r) {
  model_t m;
  build(&m, prefetch, max_unsharded, debug);
  if (loop == RANDOM)
    run_random(&m, seed);
  else
    run_structured(&m, loop);
  /* Every rank reads every unit any subset of ranks uses, at once (unused by the structured loops:
   * never stepped). */
  for (int a = 0; a < NA; ++a) {
    any_unshard(&m, a, 0);
    any_check(&m, a, "at the end, read by every rank");
    any_reshard(&m, a);
  }
  collect(&m, r);
  char label[120];
  snprintf(label, sizeof label, "%s (seed %llu), prefetch %d, max_unsharded %d, debug %d",
           loop_names[loop], (unsigned long long)seed, prefetch, max_unsharded, debug);
  finish(&m, prefetch, loop, label);
}

static void compare(const result_t* want, const result_t* got, const char* label) {
  int bad = memcmp(&want->acc, &got->acc, sizeof want->acc) != 0;
  for (int k = 0; k < NT; ++k)
    bad += want->n[k] != got->n[k] ||
           memcmp(want->shards[k], got->shards[k], want->n[k] * sizeof(float)) != 0;
  char msg[260];
  snprintf(msg, sizeof msg, "%s: reads (%.17g, %.17g) and shards bitwise equal to prefetch off",
           label, want->acc, got->acc);
  CHECK_MSG(bad == 0, msg);
}

/* The counters and the trace, on a sequence whose decisions are known: the first iteration
 * records the order 0..NU-1; the second unshards unit 0 (predicting unit 1), then stops. With
 * max_unsharded 1 the caller's own unit fills the limit: the prediction is skipped. With 2, unit 1
 * is prefetched, never claimed, and released at fsdp_begin_backward. */
static int file_contains(const char* path, const char* needle) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  static char buf[1 << 20];
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strstr(buf, needle) != NULL;
}

static void check_counts_and_trace(void) {
  char dir[64] = "/tmp/fsdp-prefetch-XXXXXX";
  if (th_rank() == 0 && !mkdtemp(dir)) dir[0] = 0;
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECK_MSG(dir[0] != 0, "a directory for the trace");
  setenv("FSDP_TRACE", dir, 1);
  for (int limit = 1; limit <= 2; ++limit) {
    model_t m;
    build(&m, 1, limit, 0);
    begin_forward(&m);
    forward(&m);
    begin_forward(&m);
    unshard(&m, 0, 0);
    read_params(&m, 0);
    reshard(&m, 0);
    begin_backward(&m);
    fsdp_memory_stats_t s;
    s.size = sizeof s;
    CHECK_OK(fsdp_memory_stats(m.ctx, &s));
    char msg[200];
    snprintf(msg, sizeof msg,
             "max_unsharded %d: started %zu, used %zu, unused %zu, skipped by the limit %zu", limit,
             s.prefetches_started, s.prefetches_used, s.prefetches_unused,
             s.prefetches_skipped_limit);
    if (limit == 1)
      CHECK_MSG(s.prefetches_started == 0 && s.prefetches_skipped_limit == 1, msg);
    else
      CHECK_MSG(s.prefetches_started == 1 && s.prefetches_used == 0 && s.prefetches_unused == 1 &&
                    s.prefetches_skipped_limit == 0,
                msg);
    CHECK(s.unsharded_bytes == 0);
    finish(&m, 1, RANDOM, "counts and trace"); /* fsdp_finalize writes the trace */
    char path[128];
    snprintf(path, sizeof path, "%s/fsdp-trace-rank%d.json", dir, th_rank());
    CHECK_MSG(
        file_contains(path, limit == 1 ? "\"prefetch_skipped_limit\"" : "\"prefetch_unused\""),
        "the trace shows the decision");
    remove(path);
  }
  unsetenv("FSDP_TRACE");
  MPI_Barrier(MPI_COMM_WORLD);
  if (th_rank() == 0) rmdir(dir);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_prefetch");
  strcpy(ckpt_dir, "/tmp/fsdp-prefetch-ckpt-XXXXXX");
  if (th_rank() == 0 && !mkdtemp(ckpt_dir)) ckpt_dir[0] = 0;
  MPI_Bcast(ckpt_dir, sizeof ckpt_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECK_MSG(ckpt_dir[0] != 0, "a directory for the checkpoints");
  check_counts_and_trace();
  static const struct { int max_unsharded, debug; } variants[] = {{0, 0}, {3, 0}, {0, 1}};
  for (int loop = 0; loop < LOOPS; ++loop) {
    const int seeds = loop == RANDOM ? 4 : 1;
    for (int sd = 0; sd < seeds; ++sd) {
      const uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(sd + 1);
      result_t off;
      run(loop, seed, 0, 0, 0, &off);
      for (size_t v = 0; v < sizeof variants / sizeof variants[0]; ++v) {
        result_t on;
        run(loop, seed, 1, variants[v].max_unsharded, variants[v].debug, &on);
        char label[160];
        snprintf(label, sizeof label, "%s (seed %d), max_unsharded %d, debug %d", loop_names[loop],
                 sd, variants[v].max_unsharded, variants[v].debug);
        compare(&off, &on, label);
        release(&on);
      }
      release(&off);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (th_rank() == 0) {
    char path[128];
    snprintf(path, sizeof path, "%s/random.h5", ckpt_dir);
    remove(path);
    rmdir(ckpt_dir);
  }
  return th_finish();
}
