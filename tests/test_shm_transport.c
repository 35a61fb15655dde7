/* The node shared-memory transport against plain MPI, in one program: the same units trained
 * with AdamW on an MPI context (ring reduce-scatter) and on a shared-memory context give
 * bitwise-identical unsharded parameters, gradient shards and updated shards at every step, in
 * float32, bfloat16 and float16, full and hybrid sharding, units from one element to 1 MiB.
 * Integer-valued gradients are also checked against the exact mean computed here. Then: the
 * steady state allocates nothing (the gradient arena grew in the first steps), every rank of a
 * node sees one buffer, and in debug mode (FSDP_DEBUG=1) a write into node-shared parameters
 * faults. With emulated nodes (FSDP_RANKS_PER_NODE) the shared-memory side is hierarchical and is
 * checked against the exact mean and for run-to-run determinism instead of against MPI's ring.
 * FSDP_TRANSPORT_SHM_ZERO_COPY goes through the same comparison (its float32 units keep their
 * shards in the node's copy; its bfloat16 ones copy), then its storage rules: any number of
 * zero-copy units, mixed frozen/trainable units copying, blocks reused after every node rank
 * destroyed their unit and not before, no memory or allocation per unshard, shard writes seen by
 * every rank at the next unshard, and in debug mode a write into the shard of an unsharded unit
 * faulting. Last, debug mode's checksum: a node peer's write into a unit this rank holds (its shard
 * under zero-copy storage, a stale parameter pointer otherwise) makes this rank's reshard fail with
 * FSDP_ERR_CORRUPT, and the unit is resharded. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { UNITS = 4, STEPS = 3 };
static const int64_t kNumel[UNITS] = {1, 1001, 65537, 262144}; /* the last is 1 MiB in float32 */

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t u[UNITS];
  fsdp_optimizer_t opt;
} model_t;

static size_t dtype_bytes(fsdp_dtype_t t) {
  return t == FSDP_FLOAT64 ? 8 : t == FSDP_FLOAT32 ? 4 : 2;
}

static void make_model(model_t* m, fsdp_transport_t transport, fsdp_sharding_strategy_t strategy,
                       fsdp_dtype_t param, fsdp_dtype_t reduce) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = transport;
  cfg.strategy = strategy;
  if (strategy == FSDP_HYBRID_SHARD) cfg.sharding_factor = 2;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &m->ctx));
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param;
  o.reduce_dtype = reduce;
  for (int k = 0; k < UNITS; ++k) {
    float* v = malloc((size_t)kNumel[k] * sizeof(float));
    uint64_t state = 1000 + (uint64_t)k; /* the same initial values on every rank */
    for (int64_t i = 0; i < kNumel[k]; ++i) v[i] = (float)th_uniform(&state);
    const void* values[1] = {v};
    fsdp_param_desc_t d = {"w", 1, &kNumel[k], FSDP_FLOAT32, 1};
    CHECK_OK(fsdp_unit_create_ex(m->ctx, 1, &d, values, &o, &m->u[k]));
    free(v);
  }
  CHECK_OK(fsdp_optimizer_create(m->ctx, FSDP_OPTIMIZER_ADAMW, NULL, UNITS, m->u, &m->opt));
}

static void free_model(model_t* m) {
  CHECK_OK(fsdp_optimizer_destroy(&m->opt));
  for (int k = 0; k < UNITS; ++k) CHECK_OK(fsdp_unit_destroy(&m->u[k]));
  CHECK_OK(fsdp_finalize(&m->ctx));
}

/* Gradient element i of unit k on `rank` at `step`: random, or a small integer (exact sums). */
static float grad_value(int k, int64_t i, int rank, int step, int integer) {
  if (integer) return (float)((i * 7 + k * 3 + rank * 5 + step) % 11) - 5.0f;
  uint64_t state =
      ((uint64_t)k << 40) ^ ((uint64_t)i << 8) ^ ((uint64_t)rank << 4) ^ (uint64_t)step;
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)th_uniform(&state) * (1.0f + (float)rank);
}

/* Writes this rank's gradient of unit k (in the unit's param dtype) and reduces it. */
static void backward(model_t* m, int k, int step, fsdp_dtype_t param, int integer) {
  void* g = NULL;
  CHECK_OK(fsdp_grad_data(m->u[k], 0, &g));
  float* x = malloc((size_t)kNumel[k] * sizeof(float));
  for (int64_t i = 0; i < kNumel[k]; ++i) x[i] = grad_value(k, i, th_rank(), step, integer);
  CHECK_OK(fsdp_convert(g, param, x, FSDP_FLOAT32, (size_t)kNumel[k]));
  free(x);
  CHECK_OK(fsdp_reduce_grads(m->u[k]));
}

static int same_bytes(const void* a, const void* b, size_t n) {
  return memcmp(a, b, n) == 0;
}

/* The exact mean of the integer gradients over the world, for this rank's shard. */
static int grads_exact(model_t* m, int k, int step) {
  int W = th_size(), srank = 0, F = 0;
  CHECK_OK(fsdp_group_info(m->ctx, FSDP_GROUP_SHARD, &srank, &F));
  float* gs = NULL;
  size_t n = 0;
  CHECK_OK(fsdp_shard_grad(m->u[k], (void**)&gs, &n));
  int bad = 0;
  for (size_t j = 0; j < n; ++j) {
    const int64_t e = (int64_t)((size_t)srank * n + j);
    int sum = 0;
    if (e < kNumel[k])
      for (int r = 0; r < W; ++r) sum += (int)grad_value(k, e, r, step, 1);
    bad += gs[j] != (float)sum / (float)W;
  }
  return bad == 0;
}

/* `transport`: FSDP_TRANSPORT_SHM, or FSDP_TRANSPORT_SHM_ZERO_COPY (whose float32 units on one
 * node keep their shards in the node's copy, and whose other units take SHM's path). */
static void compare(fsdp_transport_t transport, fsdp_sharding_strategy_t strategy,
                    fsdp_dtype_t param, const char* label) {
  model_t mpi, shm;
  make_model(&mpi, FSDP_TRANSPORT_MPI, strategy, param, param);
  make_model(&shm, transport, strategy, param, param);
  fsdp_transport_t t = FSDP_TRANSPORT_AUTO;
  CHECK_OK(fsdp_context_placement(shm.ctx, NULL, NULL, NULL, &t));
  CHECK_MSG(t == transport, label);
  int F = 0;
  CHECK_OK(fsdp_context_config(shm.ctx, &F, NULL, NULL));
  const int zero_copy = th_zero_copy(shm.ctx) && param == FSDP_FLOAT32;
  for (int k = 0; k < UNITS; ++k) {
    int z = -1;
    CHECK_OK(fsdp_unit_zero_copy(shm.u[k], &z));
    CHECK_MSG(z == zero_copy, label);
  }
  /* Bitwise against MPI's ring when the shard group is one node's team; hierarchical otherwise. */
  const int one_team = th_unsharded_sharers(shm.ctx) == (size_t)F;
  char msg[160];
  int params_equal = 1, grads_equal = 1, shards_equal = 1, exact = 1;
  for (int step = 0; step < STEPS; ++step) {
    const int integer = step == 0 && param == FSDP_FLOAT32;
    for (int k = 0; k < UNITS; ++k) {
      CHECK_OK(fsdp_unshard(mpi.u[k]));
      CHECK_OK(fsdp_unshard(shm.u[k]));
      void *a = NULL, *b = NULL;
      CHECK_OK(fsdp_param_data(mpi.u[k], 0, &a));
      CHECK_OK(fsdp_param_data(shm.u[k], 0, &b));
      if (one_team || step == 0) /* hierarchical sums differ from the ring in the last bits */
        params_equal &= same_bytes(a, b, (size_t)kNumel[k] * dtype_bytes(param));
      backward(&mpi, k, step, param, integer);
      backward(&shm, k, step, param, integer);
      CHECK_OK(fsdp_reshard(mpi.u[k]));
      CHECK_OK(fsdp_reshard(shm.u[k]));
      float *ga = NULL, *gb = NULL;
      size_t na = 0, nb = 0;
      CHECK_OK(fsdp_shard_grad(mpi.u[k], (void**)&ga, &na));
      CHECK_OK(fsdp_shard_grad(shm.u[k], (void**)&gb, &nb));
      if (one_team) grads_equal &= na == nb && same_bytes(ga, gb, na * sizeof(float));
      if (integer) exact &= grads_exact(&shm, k, step) && grads_exact(&mpi, k, step);
    }
    CHECK_OK(fsdp_optimizer_step(mpi.opt));
    CHECK_OK(fsdp_optimizer_step(shm.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(mpi.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(shm.opt));
    for (int k = 0; k < UNITS && one_team; ++k) {
      float *sa = NULL, *sb = NULL;
      size_t na = 0, nb = 0;
      CHECK_OK(fsdp_shard_data(mpi.u[k], (void**)&sa, &na));
      CHECK_OK(fsdp_shard_data(shm.u[k], (void**)&sb, &nb));
      shards_equal &= na == nb && same_bytes(sa, sb, na * sizeof(float));
    }
  }
  snprintf(msg, sizeof msg, "%s: unsharded parameters bitwise equal", label);
  CHECK_MSG(params_equal, msg);
  snprintf(msg, sizeof msg, "%s: gradient shards bitwise equal to MPI's ring", label);
  CHECK_MSG(grads_equal, msg);
  snprintf(msg, sizeof msg, "%s: AdamW shards bitwise equal", label);
  CHECK_MSG(shards_equal, msg);
  snprintf(msg, sizeof msg, "%s: integer gradients reduce to the exact mean", label);
  CHECK_MSG(exact, msg);
  free_model(&mpi);
  free_model(&shm);
}

/* Two runs of the same training on the shared-memory transport end in the same bits. */
static void check_determinism(void) {
  float* first[UNITS] = {NULL};
  for (int run = 0; run < 2; ++run) {
    model_t m;
    make_model(&m, FSDP_TRANSPORT_SHM, FSDP_FULL_SHARD, FSDP_BFLOAT16, FSDP_BFLOAT16);
    for (int step = 0; step < STEPS; ++step) {
      for (int k = 0; k < UNITS; ++k) {
        CHECK_OK(fsdp_unshard(m.u[k]));
        backward(&m, k, step, FSDP_BFLOAT16, 0);
        CHECK_OK(fsdp_reshard(m.u[k]));
      }
      CHECK_OK(fsdp_optimizer_step(m.opt));
      CHECK_OK(fsdp_optimizer_zero_grad(m.opt));
    }
    int same = 1;
    for (int k = 0; k < UNITS; ++k) {
      float* s = NULL;
      size_t n = 0;
      CHECK_OK(fsdp_shard_data(m.u[k], (void**)&s, &n));
      if (run == 0) {
        first[k] = malloc(n * sizeof(float));
        memcpy(first[k], s, n * sizeof(float));
      } else {
        same &= same_bytes(first[k], s, n * sizeof(float));
        free(first[k]);
      }
    }
    if (run == 1) CHECK_MSG(same, "shared memory, bfloat16: two runs give the same bits");
    free_model(&m);
  }
}

/* After the first steps (the gradient arena grows inside reduces), training allocates nothing. */
static void check_steady_state(void) {
  model_t m;
  make_model(&m, FSDP_TRANSPORT_SHM, FSDP_FULL_SHARD, FSDP_FLOAT32, FSDP_FLOAT32);
  fsdp_memory_stats_t s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  uint64_t calls[6] = {0};
  for (int step = 0; step < 6; ++step) {
    for (int k = 0; k < UNITS; ++k) {
      CHECK_OK(fsdp_unshard(m.u[k]));
      backward(&m, k, step, FSDP_FLOAT32, 0);
      CHECK_OK(fsdp_reshard(m.u[k]));
    }
    CHECK_OK(fsdp_optimizer_step(m.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(m.opt));
    CHECK_OK(fsdp_memory_stats(m.ctx, &s));
    calls[step] = s.allocation_calls;
  }
  CHECK_MSG(calls[5] == calls[2], "shared memory: no allocation from the third step on");
  free_model(&m);
}

/* Zero-copy storage: 200 units all keep their shards in node-shared blocks and their initial
 * values through unshards, which take no memory and allocate nothing; units destroyed on every
 * rank give their blocks to new ones (no new shared memory); a block one rank still uses is not
 * handed out again although another rank destroyed its unit; past the 1,024 blocks a chunk
 * counts, a new chunk is made; a unit with frozen and trainable parameters takes the copy path. */
static void check_zero_copy_storage(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_SHM_ZERO_COPY;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  const int expected = th_zero_copy(ctx);
  enum { MANY = 200 };
  fsdp_unit_t u[MANY];
  const int64_t n = 3001;
  float* v = malloc((size_t)n * sizeof(float));
  int values_ok = 1, flags_ok = 1, same_blocks = 1;
  uint64_t created[2] = {0, 0};
  void* shard_at[MANY];
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < MANY; ++k) {
      for (int64_t i = 0; i < n; ++i) v[i] = (float)(k * 10000 + i + round);
      const void* values[1] = {v};
      fsdp_param_desc_t d = {"w", 1, &n, FSDP_FLOAT32, 1};
      CHECK_OK(fsdp_unit_create(ctx, 1, &d, values, &u[k]));
      int z = -1;
      CHECK_OK(fsdp_unit_zero_copy(u[k], &z));
      flags_ok &= z == expected;
      void* sp = NULL;
      CHECK_OK(fsdp_shard_data(u[k], &sp, NULL));
      if (round == 1) same_blocks &= sp == shard_at[k];
      shard_at[k] = sp;
    }
    const uint64_t calls = created[round] = th_allocation_calls(ctx);
    for (int k = 0; k < MANY; ++k) {
      CHECK_OK(fsdp_unshard(u[k]));
      float* p = NULL;
      CHECK_OK(fsdp_param_data(u[k], 0, (void**)&p));
      for (int64_t i = 0; i < n; ++i) values_ok &= p[i] == (float)(k * 10000 + i + round);
      if (expected && k == MANY / 2) {
        fsdp_memory_stats_t m;
        memset(&m, 0, sizeof m);
        m.size = sizeof m;
        CHECK_OK(fsdp_memory_stats(ctx, &m));
        CHECK_MSG(m.unsharded_bytes == 0, "zero-copy: an unsharded unit takes no memory");
      }
      CHECK_OK(fsdp_reshard(u[k]));
    }
    if (expected)
      CHECK_MSG(th_allocation_calls(ctx) == calls, "zero-copy: unsharding allocates nothing");
    for (int k = 0; k < MANY; ++k) CHECK_OK(fsdp_unit_destroy(&u[k]));
  }
  CHECK_MSG(flags_ok, "zero-copy: every unit that qualifies, however many");
  CHECK_MSG(values_ok, "zero-copy: every unit unshards to its initial values");
  if (expected)
    CHECK_MSG(created[1] == created[0] && same_blocks,
              "zero-copy: destroyed units' blocks are reused, in the same order");

  /* One rank destroys its unit first: the block stays its peers' until they destroy theirs. */
  const int64_t m1 = 1000;
  fsdp_param_desc_t d1 = {"w", 1, &m1, FSDP_FLOAT32, 1};
  fsdp_unit_t kept = NULL, fresh = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d1, NULL, &kept));
  float* ks = NULL;
  size_t kn = 0;
  CHECK_OK(fsdp_shard_data(kept, (void**)&ks, &kn));
  for (size_t j = 0; j < kn; ++j) ks[j] = 7.0f;
  const int first = th_rank() % th_ranks_per_node() == 0;
  if (first) CHECK_OK(fsdp_unit_destroy(&kept));
  CHECK_OK(fsdp_unit_create(ctx, 1, &d1, NULL, &fresh)); /* zeroes its shard */
  float* fs = NULL;
  CHECK_OK(fsdp_shard_data(fresh, (void**)&fs, NULL));
  for (size_t j = 0; j < kn; ++j) fs[j] = -1.0f;
  MPI_Barrier(MPI_COMM_WORLD);
  if (!first) {
    int intact = 1;
    for (size_t j = 0; j < kn; ++j) intact &= ks[j] == 7.0f;
    CHECK_MSG(intact, "zero-copy: a block is not reused while a node rank still has its unit");
    CHECK_OK(fsdp_unit_destroy(&kept));
  }
  CHECK_OK(fsdp_unit_destroy(&fresh));

  /* More blocks than a chunk's head page counts (1,024 with 4 KiB pages): a second chunk. */
  if (expected && th_size() <= 2) {
    enum { TINY = 1100 };
    fsdp_unit_t* t = malloc(sizeof(fsdp_unit_t) * TINY);
    const uint64_t before = th_allocation_calls(ctx);
    const int64_t one = 1;
    fsdp_param_desc_t d = {"w", 1, &one, FSDP_FLOAT32, 1};
    int z_ok = 1;
    for (int k = 0; k < TINY; ++k) {
      const float value = (float)k;
      const void* values[1] = {&value};
      CHECK_OK(fsdp_unit_create(ctx, 1, &d, values, &t[k]));
      int z = 0;
      CHECK_OK(fsdp_unit_zero_copy(t[k], &z));
      z_ok &= z == 1;
    }
    CHECK_MSG(z_ok && th_allocation_calls(ctx) == before + 1,
              "zero-copy: 1,100 units in two chunks, the second made when the first's counts ran "
              "out");
    int tiny_ok = 1;
    for (int k = 0; k < TINY; k += 97) {
      CHECK_OK(fsdp_unshard(t[k]));
      float* p = NULL;
      CHECK_OK(fsdp_param_data(t[k], 0, (void**)&p));
      tiny_ok &= p[0] == (float)k;
      CHECK_OK(fsdp_reshard(t[k]));
    }
    CHECK_MSG(tiny_ok, "zero-copy: units in both chunks unshard to their values");
    for (int k = 0; k < TINY; ++k) CHECK_OK(fsdp_unit_destroy(&t[k]));
    free(t);
  }

  /* Trainable and frozen parameters in one unit: this rank's blocks are not contiguous. */
  const int64_t shapes[2] = {257, 129};
  fsdp_param_desc_t d2[2] = {{"a", 1, &shapes[0], FSDP_FLOAT32, 1},
                             {"b", 1, &shapes[1], FSDP_FLOAT32, 0}};
  fsdp_unit_t mixed = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 2, d2, NULL, &mixed));
  int z = -1;
  CHECK_OK(fsdp_unit_zero_copy(mixed, &z));
  CHECK_MSG(z == 0, "zero-copy: a unit with frozen and trainable parameters copies");
  CHECK_OK(fsdp_unit_destroy(&mixed));
  free(v);
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Zero-copy storage, the rule's other side: a shard written after the unit's reduce (here after
 * its reshard, with a barrier standing for the reduce) is what every rank of the node reads at
 * the next unshard, with no copy in between. */
static void check_zero_copy_writes(void) {
  model_t m;
  make_model(&m, FSDP_TRANSPORT_SHM_ZERO_COPY, FSDP_FULL_SHARD, FSDP_FLOAT32, FSDP_FLOAT32);
  int srank = 0, F = 0;
  CHECK_OK(fsdp_group_info(m.ctx, FSDP_GROUP_SHARD, &srank, &F));
  int ok = 1;
  for (int round = 0; round < 3; ++round) {
    float* s = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_shard_data(m.u[2], (void**)&s, &n));
    for (size_t j = 0; j < n; ++j) s[j] = (float)(round * 1000003 + srank * (int)n + (int)j);
    CHECK_OK(fsdp_unshard(m.u[2]));
    float* p = NULL;
    CHECK_OK(fsdp_param_data(m.u[2], 0, (void**)&p));
    for (int64_t i = 0; i < kNumel[2]; ++i) ok &= p[i] == (float)(round * 1000003 + i);
    CHECK_OK(fsdp_reshard(m.u[2]));
    MPI_Barrier(MPI_COMM_WORLD); /* nobody reads the unit any more: shards may be written */
  }
  CHECK_MSG(ok, "zero-copy: every rank reads the shards as their ranks last wrote them");
  free_model(&m);
}

static sigjmp_buf fault_jump;
static void on_fault(int sig) {
  (void)sig;
  siglongjmp(fault_jump, 1);
}

/* Debug mode: node-shared parameters are read-only to the caller; after reshard the library
 * reuses the buffer normally. */
static int write_faults(volatile float* p, float value) {
  struct sigaction act, old_segv, old_bus;
  memset(&act, 0, sizeof act);
  act.sa_handler = on_fault;
  sigemptyset(&act.sa_mask);
  sigaction(SIGSEGV, &act, &old_segv);
  sigaction(SIGBUS, &act, &old_bus);
  volatile int faulted = 0;
  if (sigsetjmp(fault_jump, 1) == 0)
    *p = value;
  else
    faulted = 1;
  sigaction(SIGSEGV, &old_segv, NULL);
  sigaction(SIGBUS, &old_bus, NULL);
  return faulted;
}

/* `transport`: with FSDP_TRANSPORT_SHM_ZERO_COPY the shard itself is in the sealed slot, so a
 * write into the shard while the unit is unsharded faults too, and works again after reshard. */
static void check_read_only(fsdp_transport_t transport) {
  setenv("FSDP_DEBUG", "1", 1);
  model_t m;
  make_model(&m, transport, FSDP_FULL_SHARD, FSDP_FLOAT32, FSDP_FLOAT32);
  unsetenv("FSDP_DEBUG");
  const int shared = th_unsharded_sharers(m.ctx) > 1;
  CHECK_OK(fsdp_unshard(m.u[3]));
  float* p = NULL;
  CHECK_OK(fsdp_param_data(m.u[3], 0, (void**)&p));
  if (transport == FSDP_TRANSPORT_SHM_ZERO_COPY && th_zero_copy(m.ctx)) {
    float* s = NULL;
    CHECK_OK(fsdp_shard_data(m.u[3], (void**)&s, NULL));
    const float was = s[1];
    CHECK_MSG(write_faults(s + 1, was + 1.0f) && s[1] == was,
              "debug mode, zero-copy: a write into the shard of an unsharded unit faults");
    CHECK_OK(fsdp_reshard(m.u[3]));
    CHECK_MSG(!write_faults(s + 1, was + 1.0f) && s[1] == was + 1.0f,
              "debug mode, zero-copy: the shard is writable again after reshard");
    s[1] = was;
    MPI_Barrier(MPI_COMM_WORLD); /* every rank restored its shard before the next unshard */
    CHECK_OK(fsdp_unshard(m.u[3]));
    CHECK_OK(fsdp_param_data(m.u[3], 0, (void**)&p));
  }
  const float before = p[5];
  const int faulted = write_faults(p + 5, before + 1.0f);
  if (shared) {
    CHECK_MSG(faulted && p[5] == before, "debug mode: a write into node-shared parameters faults");
  } else {
    CHECK_MSG(!faulted, "a rank alone on its node writes its own buffer");
  }
  CHECK_OK(fsdp_reshard(m.u[3]));
  for (int round = 0; round < 2; ++round) { /* the slot is writable to the library again */
    CHECK_OK(fsdp_unshard(m.u[3]));
    CHECK_OK(fsdp_reshard(m.u[3]));
  }
  free_model(&m);
}

/* Debug mode: a node peer writing into the node's copy of a unit while this rank still holds it
 * (its own shard under zero-copy storage, or a parameter pointer kept past its reshard) is
 * reported by this rank's reshard, which reshards all the same. The writer is each node's second
 * rank; it writes after every rank's unshard and its own reshard, the holders reshard after it
 * wrote, and it restores the value once they have. Round 1 writes nothing and passes: the check
 * starts afresh at each unshard. Round 2 is the rule's own case (test_sgd's loop): the holders
 * reduce the unit's gradients before they reshard, and the writer writes once that reduce is
 * done, which the rule allows, so nothing is reported. */
static void check_peer_writes(fsdp_transport_t transport) {
  setenv("FSDP_DEBUG", "1", 1);
  model_t m;
  make_model(&m, transport, FSDP_FULL_SHARD, FSDP_FLOAT32, FSDP_FLOAT32);
  unsetenv("FSDP_DEBUG");
  const int zero_copy = th_zero_copy(m.ctx), shared = th_unsharded_sharers(m.ctx) > 1;
  const int writer = shared && th_rank() % th_ranks_per_node() == 1;
  for (int round = 0; round < 3; ++round) {
    const int write = writer && round != 1, reduce = round == 2;
    CHECK_OK(fsdp_unshard(m.u[3]));
    float *p = NULL, *s = NULL, *g = NULL;
    CHECK_OK(fsdp_param_data(m.u[3], 0, (void**)&p));
    CHECK_OK(fsdp_shard_data(m.u[3], (void**)&s, NULL));
    /* Zero-copy: the writer's own shard; else an element of the node's copy, through p. */
    float* target = zero_copy ? s : p + 8 * th_rank();
    MPI_Barrier(MPI_COMM_WORLD); /* every rank holds the unit: its content is checksummed */
    if (reduce) {
      CHECK_OK(fsdp_zero_grads(m.u[3]));
      CHECK_OK(fsdp_grad_data(m.u[3], 0, (void**)&g));
      g[0] = 1.0f;
    }
    if (writer) CHECK_OK(fsdp_reshard(m.u[3]));
    if (reduce) CHECK_OK(fsdp_reduce_grads(m.u[3])); /* the holders still hold the unit */
    float was = 0.0f;
    if (write) {
      was = *target;
      *target = was + 1.0f; /* breaks the rule on purpose in round 0 */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!writer && shared && round == 0) {
      CHECK_FAILS(fsdp_reshard(m.u[3]), FSDP_ERR_CORRUPT, "changed while this rank held them");
      CHECK_MSG(fsdp_param_data(m.u[3], 0, (void**)&p) == FSDP_ERR_STATE,
                "debug mode: the unit is resharded after the report");
    } else if (!writer) {
      CHECK_OK(fsdp_reshard(m.u[3])); /* nobody wrote, after the reduce, or alone on its node */
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (write) *target = was; /* nobody reads the unit now */
  }
  free_model(&m);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_shm_transport");
  /* This program picks its transports itself; MPI's ring is the order shared memory reproduces. */
  unsetenv("FSDP_TRANSPORT");
  setenv("FSDP_REDUCE_SCATTER_ALGORITHM", "ring", 1);
  const fsdp_transport_t shm = FSDP_TRANSPORT_SHM, zero_copy = FSDP_TRANSPORT_SHM_ZERO_COPY;
  compare(shm, FSDP_FULL_SHARD, FSDP_FLOAT32, "full, float32");
  compare(shm, FSDP_FULL_SHARD, FSDP_BFLOAT16, "full, bfloat16");
  compare(shm, FSDP_FULL_SHARD, FSDP_FLOAT16, "full, float16");
  if (th_size() == 4) compare(shm, FSDP_HYBRID_SHARD, FSDP_BFLOAT16, "hybrid F=2, bfloat16");
  compare(zero_copy, FSDP_FULL_SHARD, FSDP_FLOAT32, "zero-copy, full, float32");
  compare(zero_copy, FSDP_FULL_SHARD, FSDP_BFLOAT16, "zero-copy, full, bfloat16 (copies)");
  if (th_size() == 4) compare(zero_copy, FSDP_HYBRID_SHARD, FSDP_FLOAT32, "zero-copy, hybrid F=2");
  check_determinism();
  check_steady_state();
  check_zero_copy_storage();
  check_zero_copy_writes();
  check_read_only(shm);
  check_read_only(zero_copy);
  check_peer_writes(shm);
  check_peer_writes(zero_copy);
  return th_finish();
}
