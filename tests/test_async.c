/* Asynchronous unshard and reduce, requests, prefetch and the rate limiter.
 *
 * Progress: rank 0 starts an all-gather and then blocks in an MPI_Recv that rank 1 satisfies with
 * an MPI_Ssend before joining the all-gather. This completes only if rank 0's all-gather really
 * progresses while its caller is blocked elsewhere (a progress thread); run at
 * MPI_THREAD_SINGLE the check reports itself skipped. Results of asynchronous operations equal
 * the synchronous references; requests are waited on once; a unit cannot be destroyed mid-flight;
 * prefetch keeps at most max_unsharded units held; ranks that unshard in different orders are
 * caught at the next fsdp_begin_forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { UNITS = 4, N = 1000 };

static float value(int unit, size_t e) {
  return (float)(unit * 10000 + (int)e);
}

static void make_units(fsdp_context_t ctx, fsdp_unit_t* u, int count) {
  static const int64_t shape[1] = {N};
  static float values[N];
  for (int k = 0; k < count; ++k) {
    for (size_t e = 0; e < N; ++e) values[e] = value(k, e);
    const void* v[1] = {values};
    fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
    CHECK_OK(fsdp_unit_create(ctx, 1, &d, v, &u[k]));
  }
}

static int params_ok(fsdp_unit_t u, int k) {
  float* p = NULL;
  CHECK_OK(fsdp_param_data(u, 0, (void**)&p)); /* waits for a pending all-gather */
  int bad = 0;
  for (size_t e = 0; e < N; ++e) bad += p[e] != value(k, e);
  return bad == 0;
}

static void check_progress(fsdp_context_t ctx, fsdp_unit_t u) {
  int threaded = -1;
  CHECK_OK(fsdp_context_async(ctx, &threaded));
  if (!threaded || th_size() < 2) {
    if (th_rank() == 0)
      printf("SKIPPED progress check: %s\n",
             threaded ? "needs 2 ranks" : "no progress thread (MPI not at THREAD_MULTIPLE)");
    return;
  }
  int token = 7;
  fsdp_request_t req = NULL;
  if (th_rank() == 0) {
    CHECK_OK(fsdp_unshard_async(u, &req));
    MPI_Recv(&token, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK_OK(fsdp_wait(&req));
  } else {
    if (th_rank() == 1) MPI_Ssend(&token, 1, MPI_INT, 0, 99, MPI_COMM_WORLD);
    CHECK_OK(fsdp_unshard_async(u, &req));
    CHECK_OK(fsdp_wait(&req));
  }
  CHECK(req == NULL);
  CHECK_MSG(params_ok(u, 0), "the all-gather progressed while the caller was blocked");
  CHECK_OK(fsdp_reshard(u));
}

static void check_requests(fsdp_context_t ctx, fsdp_unit_t* u) {
  const int W = th_size();
  /* Several all-gathers in flight, then implicit and explicit waits. */
  fsdp_request_t req[UNITS];
  for (int k = 0; k < UNITS; ++k) CHECK_OK(fsdp_unshard_async(u[k], &req[k]));
  CHECK_MSG(params_ok(u[2], 2), "fsdp_param_data waits for its unit");
  for (int k = 0; k < UNITS; ++k) {
    fsdp_request_t copy = req[k];
    CHECK_OK(fsdp_wait(&req[k]));
    CHECK_FAILS(fsdp_wait(&req[k]), FSDP_ERR_INVALID_HANDLE, "*req");
    CHECK_FAILS(fsdp_wait(&copy), FSDP_ERR_DESTROYED_HANDLE, "already waited");
    CHECK(params_ok(u[k], k));
    CHECK_OK(fsdp_reshard(u[k]));
  }
  /* A unit cannot be destroyed while its all-gather is in flight; nothing changes. */
  fsdp_request_t r = NULL;
  CHECK_OK(fsdp_unshard_async(u[0], &r));
  fsdp_unit_t keep = u[0];
  CHECK_FAILS(fsdp_unit_destroy(&u[0]), FSDP_ERR_STATE, "in flight");
  CHECK(u[0] == keep);
  CHECK_FAILS(fsdp_unshard_async(u[0], NULL), FSDP_ERR_STATE, "already unsharded");
  CHECK_OK(fsdp_wait(&r));
  CHECK(params_ok(u[0], 0));
  CHECK_OK(fsdp_reshard(u[0]));

  /* Asynchronous reduces of every unit at once: each shard equals the exact mean. */
  for (int k = 0; k < UNITS; ++k) {
    float* g = NULL;
    CHECK_OK(fsdp_zero_grads(u[k]));
    CHECK_OK(fsdp_grad_data(u[k], 0, (void**)&g));
    for (size_t e = 0; e < N; ++e) g[e] = (float)((th_rank() + 1) * (k + 1) * (int)(e % 9));
    CHECK_OK(fsdp_reduce_grads_async(u[k], &req[k]));
  }
  int srank = 0, bad = 0;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  for (int k = UNITS - 1; k >= 0; --k) {
    CHECK_OK(fsdp_wait(&req[k]));
    float* gs = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_shard_grad(u[k], (void**)&gs, &n));
    for (size_t j = 0; j < n; ++j) {
      const size_t e = (size_t)srank * n + j;
      const float want =
          e < N ? (float)(W * (W + 1) / 2 * (k + 1) * (int)(e % 9)) / (float)W : 0.0f;
      bad += gs[j] != want;
    }
  }
  CHECK_MSG(bad == 0, "asynchronous reduces equal the exact mean");
}

/* Two iterations with forward prefetch: in the second, unsharding unit k starts unit k+1. */
static void check_prefetch(fsdp_context_t ctx, fsdp_unit_t* u) {
  size_t padded = 0;
  CHECK_OK(fsdp_unit_numel(u[0], NULL, &padded, NULL));
  /* Zero-copy units hold no unsharded memory: there the check below cannot see prefetches. */
  const size_t unit_bytes =
      th_zero_copy(ctx) ? 0 : padded * sizeof(float) / th_unsharded_sharers(ctx);
  CHECK_OK(fsdp_set_prefetch(ctx, 1, 1));
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  for (int iter = 0; iter < 3; ++iter) {
    CHECK_OK(fsdp_begin_forward(ctx));
    CHECK_OK(fsdp_reset_peak_memory(ctx));
    for (int k = 0; k < UNITS; ++k) {
      CHECK_OK(fsdp_unshard(u[k]));
      CHECK_OK(fsdp_memory_stats(ctx, &m));
      const int prefetched = iter > 0 && k + 1 < UNITS;
      char msg[96];
      snprintf(msg, sizeof msg, "iteration %d unit %d: %s", iter, k,
               prefetched ? "the next unit is prefetched" : "nothing is prefetched");
      CHECK_MSG(m.unsharded_bytes == unit_bytes * (size_t)(1 + prefetched), msg);
      CHECK(params_ok(u[k], k));
      if (k == 1 && iter == 2) {
        /* Holding unit 1 while unit 2 (prefetched) is unsharded: unit 3's prefetch is skipped
         * (the limit is 2) instead of allocating a third buffer. */
        CHECK_OK(fsdp_unshard(u[2]));
        CHECK_OK(fsdp_memory_stats(ctx, &m));
        CHECK_MSG(m.unsharded_bytes == 2 * unit_bytes, "the rate limiter skips the prefetch");
        CHECK_OK(fsdp_reshard(u[1]));
        CHECK_OK(fsdp_reshard(u[2]));
        CHECK_OK(fsdp_unshard(u[3]));
        CHECK(params_ok(u[3], 3));
        CHECK_OK(fsdp_reshard(u[3]));
        break;
      }
      CHECK_OK(fsdp_reshard(u[k]));
    }
    CHECK_OK(fsdp_begin_backward(ctx));
    for (int k = UNITS - 1; k >= 0 && iter < 2; --k) {
      CHECK_OK(fsdp_unshard(u[k]));
      CHECK(params_ok(u[k], k));
      float* g = NULL;
      CHECK_OK(fsdp_grad_data(u[k], 0, (void**)&g));
      g[0] = 1.0f;
      CHECK_OK(fsdp_reshard(u[k]));
      CHECK_OK(fsdp_reduce_grads_async(u[k], NULL));
    }
    CHECK_OK(fsdp_memory_stats(ctx, &m));
    CHECK_MSG(m.peak_unsharded_bytes <= 2 * unit_bytes, "never more than 2 units unsharded");
    /* iteration 2 ends differently from iteration 1: the order check must still agree (every
     * rank did the same). */
  }
  CHECK_OK(fsdp_set_prefetch(ctx, 0, 0));
  CHECK_OK(fsdp_begin_forward(ctx));
}

/* Ranks unsharding units of equal size in different orders would gather the wrong units
 * without any error; the next fsdp_begin_forward catches it on every rank. */
static void check_divergence(fsdp_context_t ctx, fsdp_unit_t* u) {
  if (th_size() < 2) return;
  CHECK_OK(fsdp_begin_forward(ctx));
  const int first = th_rank() == 1 ? 1 : 0;
  CHECK_OK(fsdp_unshard(u[first]));
  CHECK_OK(fsdp_unshard(u[1 - first]));
  CHECK_OK(fsdp_reshard(u[0]));
  CHECK_OK(fsdp_reshard(u[1]));
  CHECK_FAILS(fsdp_begin_forward(ctx), FSDP_ERR_MISMATCH, "unshard orders");
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_async");
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.max_unsharded = 2;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  fsdp_unit_t u[UNITS];
  make_units(ctx, u, UNITS);
  check_progress(ctx, u[0]);
  check_requests(ctx, u);
  check_prefetch(ctx, u);
  check_divergence(ctx, u);
  CHECK_FAILS(fsdp_set_prefetch(ctx, 2, 0), FSDP_ERR_INVALID_ARGUMENT, "forward");
  for (int k = 0; k < UNITS; ++k) CHECK_OK(fsdp_unit_destroy(&u[k]));
  CHECK_OK(fsdp_finalize(&ctx));
  cfg.max_unsharded = -1;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "max_unsharded");
  return th_finish();
}
