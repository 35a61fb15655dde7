/* The dim-0 unit layout (FSDP_LAYOUT_DIM0, FSDP2's per-parameter sharding) against the flat
 * layout: fsdp_unshard and fsdp_reduce_grads of the same unit, on the node shared-memory and the
 * MPI transport, in the same run. The unit is a transformer block of width d (FSDP2's unit):
 * attention in [3d, d] and its bias [3d], out [d, d] and [d], two norms' [d] x 2, MLP up [4d, d]
 * and [4d], down [d, 4d] and [d]: 12 d^2 + 13 d float32 elements, d from 128 to 1024 (0.8 to 50
 * MiB). The dim-0 unshard places each rank's rows (shm writes them straight into the node copy;
 * MPI all-gathers into scratch and copies them out); its reduce puts the gradient's rows rank
 * after rank first. Each iteration's time is the slowest rank's; the four units of a size run in
 * an order that rotates every iteration; medians after warm-up. ratio = flat time / dim-0 time
 * (1: as fast; the target is >= 0.9).
 *
 * usage: bench_layout [--out FILE.json] [--max-d D] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "fsdp.h"

#define NPARAMS 10
enum { FLAT_SHM, DIM0_SHM, FLAT_MPI, DIM0_MPI, NUM_UNITS };
static const char* const kUnitNames[NUM_UNITS] = {"flat_shm", "dim0_shm", "flat_mpi", "dim0_mpi"};

static fsdp_context_t make_context(fsdp_transport_t t) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = t;
  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  return ctx;
}

static fsdp_unit_t block_unit(fsdp_context_t ctx, int64_t d, int64_t layout) {
  static int64_t shapes[NPARAMS][2];
  static const char* const names[NPARAMS] = {"qkv.w", "qkv.b", "out.w", "out.b",  "norm1",
                                             "norm2", "up.w",  "up.b",  "down.w", "down.b"};
  const int64_t s[NPARAMS][2] = {{3 * d, d}, {3 * d, 0}, {d, d},     {d, 0},     {d, 0},
                                 {d, 0},     {4 * d, d}, {4 * d, 0}, {d, 4 * d}, {d, 0}};
  fsdp_param_desc_t desc[NPARAMS];
  for (int i = 0; i < NPARAMS; ++i) {
    shapes[i][0] = s[i][0];
    shapes[i][1] = s[i][1];
    desc[i].name = names[i];
    desc[i].ndim = s[i][1] ? 2 : 1;
    desc[i].shape = shapes[i];
    desc[i].dtype = FSDP_FLOAT32;
    desc[i].requires_grad = 1;
  }
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.layout = layout;
  fsdp_unit_t u = NULL;
  TRY(fsdp_unit_create_ex(ctx, NPARAMS, desc, NULL, &o, &u));
  return u;
}

static double slowest(double dt) {
  double out = 0.0;
  MPI_Allreduce(&dt, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static double time_unshard(fsdp_unit_t u) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  TRY(fsdp_unshard(u));
  const double dt = MPI_Wtime() - t0;
  TRY(fsdp_reshard(u));
  return slowest(dt);
}

/* As a training step uses it: the gradient shard marked zero, every gradient written. */
static double time_reduce(fsdp_unit_t u) {
  TRY(fsdp_zero_grads(u));
  for (int i = 0; i < NPARAMS; ++i) {
    float* g = NULL;
    size_t n = 0;
    TRY(fsdp_grad_data(u, i, (void**)&g));
    TRY(fsdp_param_numel(u, i, &n));
    for (size_t e = 0; e < n; ++e) g[e] = 0.5f;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  TRY(fsdp_reduce_grads(u));
  return slowest(MPI_Wtime() - t0);
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* out_path = NULL;
  int64_t max_d = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
    if (!strcmp(argv[i], "--max-d")) max_d = strtoll(argv[i + 1], NULL, 10);
  }
  fsdp_context_t shm = make_context(FSDP_TRANSPORT_SHM), mpi = make_context(FSDP_TRANSPORT_MPI);
  FILE* json = NULL;
  if (rank == 0) {
    json = out_path ? fopen(out_path, "w") : NULL;
    if (json)
      fprintf(json,
              "{\n  \"benchmark\": \"layout\",\n  \"ranks\": %d,\n  \"statistic\": "
              "\"median of per-iteration slowest-rank time\",\n  \"results\": [\n",
              world);
    printf(
        "# Unit layouts, %d ranks: flat vs dim-0 (FSDP2's), one transformer block of width d\n\n"
        "Seconds (median, slowest rank); ratio = flat / dim-0 (>= 0.9 wanted).\n\n"
        "| d | MiB | unshard flat shm | dim-0 shm | ratio | unshard flat mpi | dim-0 mpi | "
        "ratio | reduce flat shm | dim-0 shm | ratio | reduce flat mpi | dim-0 mpi | ratio |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        world);
  }
  int first = 1;
  for (int64_t d = 128; d <= max_d; d *= 2) {
    fsdp_unit_t u[NUM_UNITS] = {
        block_unit(shm, d, FSDP_LAYOUT_FLAT), block_unit(shm, d, FSDP_LAYOUT_DIM0),
        block_unit(mpi, d, FSDP_LAYOUT_FLAT), block_unit(mpi, d, FSDP_LAYOUT_DIM0)};
    const double mib = (double)(12 * d * d + 13 * d) * 4.0 / 1048576.0;
    const int warmup = 3;
    int iters = (int)(2048.0 / mib);
    iters = iters < 9 ? 9 : iters > 41 ? 41 : iters;
    double* t[2][NUM_UNITS];
    for (int op = 0; op < 2; ++op)
      for (int k = 0; k < NUM_UNITS; ++k) t[op][k] = malloc(sizeof(double) * (size_t)iters);
    for (int it = -warmup; it < iters; ++it)
      for (int j = 0; j < NUM_UNITS; ++j) {
        const int k = (j + it + warmup) % NUM_UNITS;
        const double un = time_unshard(u[k]), re = time_reduce(u[k]);
        if (it >= 0) t[0][k][it] = un, t[1][k][it] = re;
      }
    double med[2][NUM_UNITS];
    for (int op = 0; op < 2; ++op)
      for (int k = 0; k < NUM_UNITS; ++k) med[op][k] = median(t[op][k], iters), free(t[op][k]);
    if (rank == 0) {
      printf("| %lld | %.1f |", (long long)d, mib);
      for (int op = 0; op < 2; ++op)
        for (int pair = 0; pair < NUM_UNITS; pair += 2)
          printf(" %.6f | %.6f | %.2f |", med[op][pair], med[op][pair + 1],
                 med[op][pair] / med[op][pair + 1]);
      printf("\n");
      fflush(stdout);
      if (json) {
        fprintf(json, "%s    {\"d\": %lld, \"bytes\": %.0f, \"iterations\": %d", first ? "" : ",\n",
                (long long)d, mib * 1048576.0, iters);
        for (int k = 0; k < NUM_UNITS; ++k)
          fprintf(json, ", \"unshard_%s_s\": %.9f, \"reduce_%s_s\": %.9f", kUnitNames[k], med[0][k],
                  kUnitNames[k], med[1][k]);
        fprintf(json, "}");
      }
    }
    first = 0;
    for (int k = 0; k < NUM_UNITS; ++k) TRY(fsdp_unit_destroy(&u[k]));
    TRY(fsdp_trim_pool(shm));
    TRY(fsdp_trim_pool(mpi));
  }
  if (json) {
    fprintf(json, "\n  ]\n}\n");
    fclose(json);
  }
  TRY(fsdp_finalize(&shm));
  TRY(fsdp_finalize(&mpi));
  MPI_Finalize();
  return 0;
}
