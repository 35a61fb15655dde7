/* The training features' benchmark (a benchmark, not a test): on this machine, in one run,
 *  1. peak parameter memory of bfloat16 units unsharded one at a time, against FSDP's formula
 *     K_full/F * sum(psi_i) + K_low * max(psi_i);
 *  2. step time of a compute-plus-communication loop (forward and backward over UNITS units, a
 *     fixed amount of arithmetic per unit), with and without prefetch and asynchronous
 *     reductions, next to the compute alone: medians after warm-up;
 *  3. per-call CPU cost in microseconds of fsdp_unshard, fsdp_reshard and fsdp_reduce_grads on a
 *     small unit, next to MPI_Allgather and MPI_Reduce_scatter_block of the same bytes.
 * MPI is initialized at MPI_THREAD_MULTIPLE (the progress thread); FSDP_PROGRESS_THREAD=0
 * measures without it. Writes JSON with --out FILE.
 *
 * usage: bench_training [--out FILE.json] [--unit-floats N] [--work PASSES] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "fsdp.h"

enum { UNITS = 6, WARMUP = 2, ITERS = 9, CALLS = 400 };

static double slowest(double t) {
  double m = 0.0;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

/* Stand-in for a layer's compute: `passes` sweeps of multiply-adds over the parameters. */
static volatile float sink;
static void compute(const float* p, size_t n, int passes) {
  float acc = 0.0f;
  for (int k = 0; k < passes; ++k)
    for (size_t i = 0; i < n; ++i) acc = acc * 0.999f + p[i];
  sink = acc;
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, size_t floats, fsdp_dtype_t param_dtype) {
  const int64_t shape[1] = {(int64_t)floats};
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param_dtype;
  fsdp_unit_t u = NULL;
  TRY(fsdp_unit_create_ex(ctx, 1, &d, NULL, &o, &u));
  return u;
}

/* 1. Memory against the formula. */
static void bench_memory(fsdp_context_t ctx, FILE* json, int rank, int F) {
  const size_t psi[4] = {1 << 20, 3 << 20, 1 << 18, (2 << 20) + 7};
  fsdp_unit_t u[4];
  size_t full = 0, low_max = 0, replicated = 0;
  for (int k = 0; k < 4; ++k) {
    replicated += 4 * psi[k]; /* DDP: every rank holds the whole float32 model */
    u[k] = make_unit(ctx, psi[k], FSDP_BFLOAT16);
    const size_t shard = (psi[k] + (size_t)F - 1) / (size_t)F;
    full += 4 * shard;
    if (2 * shard * (size_t)F > low_max) low_max = 2 * shard * (size_t)F;
  }
  TRY(fsdp_trim_pool(ctx));
  TRY(fsdp_reset_peak_memory(ctx));
  for (int pass = 0; pass < 2; ++pass)
    for (int k = 0; k < 4; ++k) {
      TRY(fsdp_unshard(u[k]));
      TRY(fsdp_reshard(u[k]));
    }
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  TRY(fsdp_memory_stats(ctx, &m));
  if (rank == 0) {
    printf("## Peak parameter memory (bfloat16 compute, float32 master, F = %d)\n\n", F);
    printf(
        "| formula bytes | measured peak_parameter_bytes | ratio | peak of everything held | "
        "replicated (DDP) bytes | DDP / measured |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n| %zu | %zu | %.4f | %zu | %zu | %.2f |\n\n",
           full + low_max, m.peak_parameter_bytes,
           (double)m.peak_parameter_bytes / (double)(full + low_max), m.peak_bytes, replicated,
           (double)replicated / (double)m.peak_parameter_bytes);
    if (json)
      fprintf(json,
              "  \"memory\": {\"formula_bytes\": %zu, \"peak_parameter_bytes\": %zu, "
              "\"peak_bytes\": %zu, \"replicated_bytes\": %zu},\n",
              full + low_max, m.peak_parameter_bytes, m.peak_bytes, replicated);
  }
  for (int k = 0; k < 4; ++k) TRY(fsdp_unit_destroy(&u[k]));
}

/* 2. One training iteration; returns its time (slowest rank). */
static double iteration(fsdp_context_t ctx, fsdp_unit_t* u, size_t floats, int passes, int overlap,
                        int communicate) {
  static float* local = NULL; /* compute alone reads a full-size local array instead */
  if (!local) local = calloc(floats, sizeof(float));
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  if (communicate) TRY(fsdp_begin_forward(ctx));
  for (int k = 0; k < UNITS; ++k) {
    float* p = NULL;
    if (communicate) {
      TRY(fsdp_unshard(u[k]));
      TRY(fsdp_param_data(u[k], 0, (void**)&p));
    } else {
      p = local; /* compute alone: no communication */
    }
    compute(p, floats, passes);
    if (communicate) TRY(fsdp_reshard(u[k]));
  }
  if (communicate) TRY(fsdp_begin_backward(ctx));
  for (int k = UNITS - 1; k >= 0; --k) {
    float* p = NULL;
    if (communicate) {
      TRY(fsdp_unshard(u[k]));
      TRY(fsdp_param_data(u[k], 0, (void**)&p));
    } else {
      p = local;
    }
    compute(p, floats, 2 * passes); /* backward: twice the work */
    if (communicate) {
      float* g = NULL;
      TRY(fsdp_grad_data(u[k], 0, (void**)&g));
      g[0] += 1.0f;
      TRY(fsdp_reshard(u[k]));
      if (overlap)
        TRY(fsdp_reduce_grads_async(u[k], NULL));
      else
        TRY(fsdp_reduce_grads(u[k]));
    }
  }
  if (communicate) {
    for (int k = 0; k < UNITS; ++k) TRY(fsdp_unit_wait(u[k]));
    for (int k = 0; k < UNITS; ++k) TRY(fsdp_zero_grads(u[k]));
  }
  return slowest(MPI_Wtime() - t0);
}

static void bench_step(fsdp_context_t ctx, FILE* json, int rank, int world, size_t floats,
                       int passes) {
  fsdp_unit_t u[UNITS];
  for (int k = 0; k < UNITS; ++k) u[k] = make_unit(ctx, floats, FSDP_DTYPE_AUTO);
  double med[3];
  const char* label[3] = {"compute only (no communication)", "no prefetch, synchronous reduce",
                          "prefetch + asynchronous reduce"};
  for (int mode = 0; mode < 3; ++mode) {
    TRY(fsdp_set_prefetch(ctx, mode == 2, mode == 2));
    double t[ITERS];
    for (int it = -WARMUP; it < ITERS; ++it) {
      const double s = iteration(ctx, u, floats, passes, mode == 2, mode != 0);
      if (it >= 0) t[it] = s;
    }
    med[mode] = median(t, ITERS);
  }
  TRY(fsdp_set_prefetch(ctx, 0, 0));
  int threaded = 0;
  TRY(fsdp_context_async(ctx, &threaded));
  if (rank == 0) {
    printf(
        "## Step time: %d units of %zu float32, forward + backward, %d ranks, progress thread "
        "%s\n\n",
        UNITS, floats, world, threaded ? "on" : "off");
    printf("| loop | median s | vs no prefetch |\n|---|---:|---:|\n");
    for (int mode = 0; mode < 3; ++mode)
      printf("| %s | %.4f | %.3f |\n", label[mode], med[mode], med[mode] / med[1]);
    printf("\n");
    if (json)
      fprintf(json,
              "  \"step\": {\"units\": %d, \"unit_floats\": %zu, \"progress_thread\": %d, "
              "\"compute_only_s\": %.6f, \"no_prefetch_s\": %.6f, \"prefetch_async_s\": %.6f},\n",
              UNITS, floats, threaded, med[0], med[1], med[2]);
  }
  for (int k = 0; k < UNITS; ++k) TRY(fsdp_unit_destroy(&u[k]));
}

/* 3. Per-call cost on a small unit. */
static void bench_overhead(fsdp_context_t ctx, FILE* json, int rank, int world) {
  const size_t floats = 256 * (size_t)world; /* 1 KiB per rank */
  fsdp_unit_t u = make_unit(ctx, floats, FSDP_DTYPE_AUTO);
  const size_t shard_n = floats / (size_t)world;
  float* shard = calloc(shard_n, sizeof(float));
  float* full = calloc(floats, sizeof(float));
  for (size_t i = 0; i < floats; ++i) full[i] = 1.0f;
  for (size_t i = 0; i < shard_n; ++i) shard[i] = 1.0f;
  double t[5][CALLS];
  for (int it = -20; it < CALLS; ++it) {
    double a = MPI_Wtime();
    TRY(fsdp_unshard(u));
    double b = MPI_Wtime();
    TRY(fsdp_reshard(u));
    double c = MPI_Wtime();
    MPI_Allgather(shard, (int)shard_n, MPI_FLOAT, full, (int)shard_n, MPI_FLOAT, MPI_COMM_WORLD);
    double d = MPI_Wtime();
    float* g = NULL;
    TRY(fsdp_grad_data(u, 0, (void**)&g));
    g[0] = 1.0f;
    double e = MPI_Wtime();
    TRY(fsdp_reduce_grads(u));
    double f = MPI_Wtime();
    MPI_Reduce_scatter_block(full, shard, (int)shard_n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double h = MPI_Wtime();
    if (it >= 0) {
      t[0][it] = b - a, t[1][it] = c - b, t[2][it] = d - c, t[3][it] = f - e, t[4][it] = h - f;
    }
  }
  double med[5];
  for (int k = 0; k < 5; ++k) med[k] = slowest(median(t[k], CALLS)) * 1e6;
  int threaded = 0;
  TRY(fsdp_context_async(ctx, &threaded));
  if (rank == 0) {
    printf(
        "## Per-call cost, %zu-byte unit, %d ranks, progress thread %s (median us, slowest "
        "rank)\n\n",
        floats * sizeof(float), world, threaded ? "on" : "off");
    printf("| call | us | raw MPI us | difference us |\n|---|---:|---:|---:|\n");
    printf("| fsdp_unshard / MPI_Allgather | %.1f | %.1f | %.1f |\n", med[0], med[2],
           med[0] - med[2]);
    printf("| fsdp_reshard | %.2f | | |\n", med[1]);
    printf("| fsdp_reduce_grads / MPI_Reduce_scatter_block | %.1f | %.1f | %.1f |\n\n", med[3],
           med[4], med[3] - med[4]);
    if (json)
      fprintf(json,
              "  \"per_call_us\": {\"unit_bytes\": %zu, \"progress_thread\": %d, \"unshard\": "
              "%.2f, \"allgather\": %.2f, \"reshard\": %.3f, \"reduce_grads\": %.2f, "
              "\"reduce_scatter\": %.2f}\n",
              floats * sizeof(float), threaded, med[0], med[2], med[1], med[3], med[4]);
  }
  free(shard), free(full);
  TRY(fsdp_unit_destroy(&u));
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* out = NULL;
  size_t floats = (size_t)1 << 20;
  int passes = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--out")) out = argv[i + 1];
    if (!strcmp(argv[i], "--unit-floats")) floats = (size_t)strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--work")) passes = atoi(argv[i + 1]);
  }
  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  int F = 0;
  TRY(fsdp_context_config(ctx, &F, NULL, NULL));
  FILE* json = rank == 0 && out ? fopen(out, "w") : NULL;
  fsdp_transport_t transport = FSDP_TRANSPORT_AUTO;
  TRY(fsdp_context_placement(ctx, NULL, NULL, NULL, &transport));
  const char* tname = transport == FSDP_TRANSPORT_SHM             ? "shm"
                      : transport == FSDP_TRANSPORT_SHM_ZERO_COPY ? "shm_zero_copy"
                                                                  : "mpi";
  const char* dc = getenv("FSDP_DEBUG_COLLECTIVES"); /* run.sh's debug-mode run */
  const int debug = dc && *dc && strcmp(dc, "0") != 0;
  if (json)
    fprintf(json,
            "{\n  \"benchmark\": \"training\",\n  \"ranks\": %d,\n  \"transport\": \"%s\",\n"
            "  \"debug_collectives\": %d,\n",
            world, tname, debug);
  if (rank == 0)
    printf("# libfsdp training benchmark, %d ranks, %s transport%s\n\n", world, tname,
           debug ? ", debug mode (FSDP_DEBUG_COLLECTIVES=1)" : "");
  bench_memory(ctx, json, rank, F);
  bench_step(ctx, json, rank, world, floats, passes);
  bench_overhead(ctx, json, rank, world);
  if (json) fprintf(json, "}\n"), fclose(json);
  TRY(fsdp_finalize(&ctx));
  MPI_Finalize();
  return 0;
}
