/* Debug mode and the watchdog (2 ranks):
 * - with debug mode on, matching calls give the values a sharding-free reference gives;
 * - ranks calling different collectives (unshard of different units; unshard against reduce)
 *   fail on every rank with FSDP_ERR_MISMATCH naming each rank's call, and nothing ran: the same
 *   calls made in agreement afterwards give the reference values;
 * - a rank whose own state refuses the agreed call fails with its error, the others with
 *   FSDP_ERR_MISMATCH naming it, instead of waiting for it in the collective;
 * - a rank that never arrives: the other's call returns FSDP_ERR_TIMEOUT naming the missing rank
 *   (debug mode), and, without debug mode, a shared-memory wait is interrupted by the watchdog;
 * - bad configuration values and environment are refused with the argument named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { N = 1000 };

static fsdp_context_t make(int debug, double timeout_s, fsdp_transport_t transport) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.debug_collectives = debug;
  cfg.timeout_s = timeout_s;
  cfg.transport = transport;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  return ctx;
}

/* A unit of N float32 values v[i] = seed + i / 8 (exact in float32). */
static fsdp_unit_t make_unit(fsdp_context_t ctx, float seed, float* values) {
  const int64_t shape[1] = {N};
  for (int i = 0; i < N; ++i) values[i] = seed + (float)i / 8;
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  const void* init[1] = {values};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, init, &u));
  return u;
}

static int params_equal(fsdp_unit_t u, const float* want) {
  void* p = NULL;
  if (fsdp_param_data(u, 0, &p) != FSDP_SUCCESS) return 0;
  return memcmp(p, want, sizeof(float) * N) == 0;
}

static void write_grad(fsdp_unit_t u) {
  void* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, &g));
  for (int i = 0; i < N; ++i) ((float*)g)[i] = (float)(th_rank() + 1) * (float)i; /* exact */
}

/* The mean over W ranks of (r + 1) * i, for this rank's shard: (W + 1) / 2 * i. */
static int grad_shard_is_mean(fsdp_unit_t u) {
  size_t shard_offset = 0, param_offset = 0, count = 0, sn = 0;
  void* s = NULL;
  if (fsdp_param_shard_range(u, 0, &shard_offset, &param_offset, &count) != FSDP_SUCCESS) return 0;
  if (fsdp_shard_grad(u, &s, &sn) != FSDP_SUCCESS) return 0;
  const double w = th_size();
  for (size_t k = 0; k < count; ++k)
    if (((float*)s)[shard_offset + k] != (float)((w + 1) / 2 * (double)(param_offset + k)))
      return 0;
  return 1;
}

static void matching_and_mismatched_calls(void) {
  fsdp_context_t ctx = make(1, 0.0, FSDP_TRANSPORT_AUTO);
  float a[N], b[N];
  fsdp_unit_t ua = make_unit(ctx, 1.0f, a), ub = make_unit(ctx, -3.0f, b);

  /* Agreeing calls: the reference values. */
  CHECK_OK(fsdp_unshard(ua));
  CHECK(params_equal(ua, a));
  CHECK_OK(fsdp_reshard(ua));

  /* Different units: both ranks fail, naming both calls. */
  fsdp_unit_t mine = th_rank() == 0 ? ua : ub;
  CHECK_FAILS(fsdp_unshard(mine), FSDP_ERR_MISMATCH, "fsdp_unshard");
  const char* msg = fsdp_last_error();
  CHECK_MSG(strstr(msg, "rank(s) 0 called") && strstr(msg, "rank(s) 1 called"), msg);
  CHECK_MSG(strstr(msg, "unit 0") && strstr(msg, "unit 1"), msg);
  /* Nothing ran: the unit is still sharded, and an agreeing unshard works. */
  CHECK_FAILS(fsdp_param_data(mine, 0, &(void*){NULL}), FSDP_ERR_STATE, "sharded");
  CHECK_OK(fsdp_unshard(ub));
  CHECK(params_equal(ub, b));

  /* Different operations: rank 0 unshards, rank 1 reduces. */
  write_grad(ub);
  if (th_rank() == 0)
    CHECK_FAILS(fsdp_unshard(ua), FSDP_ERR_MISMATCH, "fsdp_reduce_grads");
  else
    CHECK_FAILS(fsdp_reduce_grads(ub), FSDP_ERR_MISMATCH, "fsdp_unshard");
  /* The gradient is still there on every rank: the agreeing reduce gives the mean. */
  CHECK_OK(fsdp_reduce_grads(ub));
  CHECK(grad_shard_is_mean(ub));
  CHECK_OK(fsdp_reshard(ub));

  /* A rank that cannot make the call it agrees on (its unit is still unsharded; it wrote no
   * gradient): it fails with its own error, the other with FSDP_ERR_MISMATCH naming it, and
   * neither waits in a collective the first never joins. */
  CHECK_OK(fsdp_unshard(ua));
  if (th_rank() == 0) CHECK_OK(fsdp_reshard(ua));
  if (th_rank() == 1) {
    CHECK_FAILS(fsdp_unshard(ua), FSDP_ERR_STATE, "already unsharded");
  } else {
    CHECK_FAILS(fsdp_unshard(ua), FSDP_ERR_MISMATCH, "rank(s) 1 refused");
    CHECK_MSG(strstr(fsdp_last_error(), "already unsharded"), fsdp_last_error());
  }
  if (th_rank() == 1) CHECK_OK(fsdp_reshard(ua));
  CHECK_OK(fsdp_unshard(ua)); /* agreeing again: it runs */
  CHECK(params_equal(ua, a));
  CHECK_OK(fsdp_reshard(ua));
  CHECK_OK(fsdp_zero_grads(ub)); /* the reduce below starts from zero again */
  if (th_rank() == 0) write_grad(ub);
  fsdp_request_t r0 = NULL;
  if (th_rank() == 0) {
    CHECK_FAILS(fsdp_reduce_grads_async(ub, &r0), FSDP_ERR_MISMATCH, "no gradient to reduce");
  } else {
    CHECK_FAILS(fsdp_reduce_grads_async(ub, &r0), FSDP_ERR_STATE, "no gradient to reduce");
  }
  if (th_rank() == 1) write_grad(ub);
  CHECK_OK(fsdp_reduce_grads(ub));
  CHECK(grad_shard_is_mean(ub));

  /* Async calls are checked the same way. */
  fsdp_request_t req = NULL;
  CHECK_OK(fsdp_unshard_async(ua, &req));
  CHECK_OK(fsdp_wait(&req));
  CHECK(params_equal(ua, a));
  CHECK_OK(fsdp_reshard(ua));

  /* Context-wide collectives are compared too: rank 0 creates an optimizer (then a grad scaler,
   * then ties a parameter) while rank 1 unshards. Each side fails naming the other's call, and
   * nothing was created, tied or gathered. */
  static const char* const context_calls[3] = {"fsdp_optimizer_create", "fsdp_grad_scaler_create",
                                               "fsdp_unit_tie"};
  for (int k = 0; k < 3; ++k) {
    fsdp_optimizer_t opt = NULL;
    fsdp_grad_scaler_t scaler = NULL;
    if (th_rank() == 0) {
      fsdp_status_t rc = FSDP_SUCCESS;
      if (k == 0) rc = fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, NULL, 1, &ua, &opt);
      if (k == 1) rc = fsdp_grad_scaler_create(ctx, 1024.0, 2.0, 0.5, 10, &scaler);
      if (k == 2) rc = fsdp_unit_tie(ub, "alias", ua, 0, NULL);
      CHECK_MSG(rc == FSDP_ERR_MISMATCH && strstr(fsdp_last_error(), "fsdp_unshard"),
                fsdp_last_error());
      CHECK_MSG(strstr(fsdp_last_error(), context_calls[k]), fsdp_last_error());
    } else {
      CHECK_FAILS(fsdp_unshard(ua), FSDP_ERR_MISMATCH, context_calls[k]);
    }
    CHECK(opt == NULL && scaler == NULL);
    CHECK_FAILS(fsdp_param_data(ua, 0, &(void*){NULL}), FSDP_ERR_STATE, "sharded");
  }
  int nparams = 0;
  CHECK_OK(fsdp_unit_info(ub, &nparams, NULL));
  CHECK_MSG(nparams == 1, "no tie was made"); /* and the agreeing calls still work: */
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, NULL, 1, &ua, &opt));
  CHECK_OK(fsdp_optimizer_destroy(&opt));

  CHECK_OK(fsdp_unit_destroy(&ua));
  CHECK_OK(fsdp_unit_destroy(&ub));
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Rank 1 never calls: rank 0's call ends with FSDP_ERR_TIMEOUT naming rank 1. */
static void missing_rank(int debug, fsdp_transport_t transport, const char* needle) {
  fsdp_context_t ctx = make(debug, 1.0, transport);
  float a[N];
  fsdp_unit_t u = make_unit(ctx, 2.0f, a);
  if (th_rank() == 0) {
    const double t0 = MPI_Wtime();
    CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_TIMEOUT, "fsdp_unshard");
    const double waited = MPI_Wtime() - t0;
    CHECK_MSG(strstr(fsdp_last_error(), needle) != NULL, fsdp_last_error());
    CHECK(waited >= 0.9 && waited < 30.0);
    /* The context takes only fsdp_finalize now. */
    CHECK_FAILS(fsdp_reshard(u), FSDP_ERR_ABORTED, "timeout");
  } else {
    sleep(3);                  /* the "stuck" rank */
    CHECK_OK(fsdp_abort(ctx)); /* as a program would after a peer's failure */
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(fsdp_finalize(&ctx));
}

static void bad_configuration(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  fsdp_context_t ctx = NULL;
  cfg.debug_collectives = 2;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT,
              "cfg->debug_collectives");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.on_timeout = (fsdp_on_timeout_t)7;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->on_timeout");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.timeout_s = 0.0 / 0.0;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->timeout_s");
  CHECK(ctx == NULL);
  const char* bad[][2] = {
      {"FSDP_DEBUG_COLLECTIVES", "yes"}, {"FSDP_TIMEOUT", "10s"}, {"FSDP_ON_TIMEOUT", "ignore"}};
  for (int k = 0; k < 3; ++k) {
    setenv(bad[k][0], bad[k][1], 1);
    CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, NULL, &ctx), FSDP_ERR_INVALID_ARGUMENT, bad[k][0]);
    unsetenv(bad[k][0]);
  }
  /* Ranks in different modes would not exchange alike: refused at fsdp_init on every rank. */
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.debug_collectives = th_rank() == 0;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_MISMATCH, "");
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_debug_collectives");
  if (th_size() != 2) {
    if (th_rank() == 0) fprintf(stderr, "test_debug_collectives needs 2 ranks\n");
    return th_finish() ? 1 : 77;
  }
  bad_configuration();
  matching_and_mismatched_calls();
  missing_rank(1, FSDP_TRANSPORT_MPI, "rank(s) 1 never called it");
  /* Without debug mode, on one node: the watchdog interrupts the shared-memory wait. */
  if (th_ranks_per_node() == 2) missing_rank(0, FSDP_TRANSPORT_SHM, "watchdog");
  return th_finish();
}
