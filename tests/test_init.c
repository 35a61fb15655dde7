/* Initialization: deferred (a callback per parameter, one full-size unit at a time), from rank 0
 * only (every rank ends with rank 0's values, also under hybrid sharding), and failures: a
 * callback that fails on one rank fails the creation on every rank and leaks nothing. The
 * reference values are the callback's own formula, evaluated here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static double value(int p, size_t e, int rank) {
  uint64_t s = ((uint64_t)p << 40) ^ e ^ 0x1417ull;
  return th_uniform(&s) + 10.0 * rank;
}

typedef struct {
  int calls;
  int rank_offset; /* 1: values depend on the rank (to see whose values survive) */
  int fail_rank;   /* this world rank's callback fails for parameter 1; -1: none */
  size_t numel[3];
} init_state_t;

static int init_param(void* user, int index, const fsdp_param_desc_t* desc, void* data) {
  init_state_t* st = user;
  ++st->calls;
  if (index == 1 && th_rank() == st->fail_rank) return 42;
  size_t n = 1;
  for (int k = 0; k < desc->ndim; ++k) n *= (size_t)desc->shape[k];
  if (n != st->numel[index]) return 7; /* the callback sees its own descriptor */
  for (size_t e = 0; e < n; ++e)
    ((double*)data)[e] = value(index, e, st->rank_offset ? th_rank() : 0);
  return 0;
}

static const int64_t shape0[2] = {17, 5}, shape1[1] = {101}, shape2[1] = {3};

static void describe(fsdp_param_desc_t d[3], int frozen_middle) {
  fsdp_param_desc_t proto[3] = {{"embed", 2, shape0, FSDP_FLOAT64, 1},
                                {"norm", 1, shape1, FSDP_FLOAT64, !frozen_middle},
                                {"head", 1, shape2, FSDP_FLOAT64, 1}};
  memcpy(d, proto, sizeof proto);
}

/* Every parameter equals value(p, e, from_rank). */
static int mismatches(fsdp_unit_t u, int from_rank) {
  int bad = 0;
  CHECK_OK(fsdp_unshard(u));
  for (int i = 0; i < 3; ++i) {
    double* p = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_param_data(u, i, (void**)&p));
    CHECK_OK(fsdp_param_numel(u, i, &n));
    for (size_t e = 0; e < n; ++e) bad += p[e] != value(i, e, from_rank);
  }
  CHECK_OK(fsdp_reshard(u));
  return bad;
}

static void check_deferred(fsdp_context_t ctx) {
  fsdp_param_desc_t d[3];
  describe(d, 1);
  init_state_t st = {0, 0, -1, {85, 101, 3}};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.init = init_param;
  o.init_user_data = &st;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_reset_peak_memory(ctx));
  CHECK_OK(fsdp_unit_create_ex(ctx, 3, d, NULL, &o, &u));
  CHECK_MSG(st.calls == 3, "the callback runs once per parameter on every rank");
  size_t padded = 0;
  CHECK_OK(fsdp_unit_numel(u, NULL, &padded, NULL));
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK_MSG(m.peak_init_bytes == padded * sizeof(double) && m.unsharded_bytes == 0,
            "deferred init holds one full-size unit while it runs, nothing after");
  size_t shard_n = 0;
  CHECK_OK(fsdp_unit_numel(u, NULL, NULL, &shard_n));
  CHECK_MSG(m.peak_unsharded_bytes == 0 && m.peak_parameter_bytes == shard_n * sizeof(double) &&
                m.peak_bytes == shard_n * sizeof(double),
            "initialization's buffer is in no training peak: they start from the shard alone");
  CHECK_MSG(mismatches(u, 0) == 0, "deferred init gives the callback's values");
  CHECK_OK(fsdp_unit_destroy(&u));
}

static void check_from_rank0(fsdp_context_t ctx) {
  fsdp_param_desc_t d[3];
  describe(d, 1);
  /* Through the callback: rank-dependent values, only rank 0's survive. */
  init_state_t st = {0, 1, -1, {85, 101, 3}};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.init = init_param;
  o.init_user_data = &st;
  o.sync_from_rank0 = 1;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 3, d, NULL, &o, &u));
  CHECK_MSG(st.calls == (th_rank() == 0 ? 3 : 0), "with sync_from_rank0 only rank 0 calls init");
  CHECK_MSG(mismatches(u, 0) == 0, "every rank starts from rank 0's callback values");
  CHECK_OK(fsdp_unit_destroy(&u));

  /* Through initial values: each rank passes its own; rank 0's survive; others may pass NULL. */
  double* values[3];
  for (int i = 0; i < 3; ++i) {
    values[i] = malloc(st.numel[i] * sizeof(double));
    for (size_t e = 0; e < st.numel[i]; ++e) values[i][e] = value(i, e, th_rank());
  }
  fsdp_unit_options_t o2 = FSDP_UNIT_OPTIONS_INIT;
  o2.sync_from_rank0 = 1;
  const void* const* mine = th_rank() == 1 ? NULL : (const void* const*)values;
  CHECK_OK(fsdp_unit_create_ex(ctx, 3, d, mine, &o2, &u));
  CHECK_MSG(mismatches(u, 0) == 0, "every rank starts from rank 0's initial values");
  CHECK_OK(fsdp_unit_destroy(&u));
  for (int i = 0; i < 3; ++i) free(values[i]);
}

static void check_failures(fsdp_context_t ctx) {
  fsdp_param_desc_t d[3];
  describe(d, 0);
  fsdp_memory_stats_t before, after;
  before.size = after.size = sizeof before;
  CHECK_OK(fsdp_memory_stats(ctx, &before));
  const int fail_rank = th_size() - 1;
  init_state_t st = {0, 0, fail_rank, {85, 101, 3}};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.init = init_param;
  o.init_user_data = &st;
  fsdp_unit_t u = NULL;
  if (th_rank() == fail_rank)
    CHECK_FAILS(fsdp_unit_create_ex(ctx, 3, d, NULL, &o, &u), FSDP_ERR_CALLBACK, "norm");
  else
    CHECK_FAILS(fsdp_unit_create_ex(ctx, 3, d, NULL, &o, &u), FSDP_ERR_MISMATCH, "rank");
  CHECK(u == NULL);
  /* Failing on rank 0 with sync_from_rank0: the others learn it too. */
  st.fail_rank = 0;
  o.sync_from_rank0 = 1;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, 3, d, NULL, &o, &u),
              th_rank() == 0 ? FSDP_ERR_CALLBACK : FSDP_ERR_MISMATCH, "");
  CHECK(u == NULL);
  CHECK_OK(fsdp_memory_stats(ctx, &after));
  CHECK_MSG(after.shard_bytes == before.shard_bytes && after.unsharded_bytes == 0,
            "failed creations leave no memory behind");
  /* initial_values and init together are ambiguous. */
  const double x[85] = {0};
  const void* vals[3] = {x, x, x};
  o.sync_from_rank0 = 0;
  st.fail_rank = -1;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, 3, d, vals, &o, &u), FSDP_ERR_INVALID_ARGUMENT,
              "initial_values");
  fsdp_unit_options_t bad = FSDP_UNIT_OPTIONS_INIT;
  bad.size = 0;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, 3, d, NULL, &bad, &u), FSDP_ERR_INVALID_ARGUMENT,
              "options->size");
  /* Options must agree across ranks: a name on one rank only. */
  fsdp_unit_options_t named = FSDP_UNIT_OPTIONS_INIT;
  if (th_size() > 1 && th_rank() == 1) named.name = "only-here";
  if (th_size() > 1)
    CHECK_FAILS(fsdp_unit_create_ex(ctx, 3, d, NULL, &named, &u), FSDP_ERR_MISMATCH, "rank");
  CHECK(u == NULL);
}

static void run(fsdp_context_t ctx) {
  check_deferred(ctx);
  check_from_rank0(ctx);
  check_failures(ctx);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_init");
  th_run_full_and_hybrid(run); /* hybrid: rank 0 scatters in its group, then broadcasts */
  return th_finish();
}
