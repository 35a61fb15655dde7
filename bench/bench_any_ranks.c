/* Units used by any subset of ranks (FSDP_USED_BY_ANY_RANKS) against collective units of the same
 * size on the same context, and raw MPI_Allgather, in the same run: the unshard when every rank
 * reads at once (one-sided reads vs the all-gather), the unshard of one rank alone (the others
 * idle in MPI_Barrier: an evaluation pass), and the gradient's way to the shard (the collective
 * fsdp_reduce_grads vs the local one plus fsdp_step_boundary). Sizes 64 KiB to 64 MiB (the
 * unsharded unit, float32), the operations interleaved in a rotating order, each iteration's time
 * the slowest rank's, medians after warm-up.
 *
 * usage: bench_any_ranks [--out FILE.json] [--max BYTES] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "fsdp.h"

enum {
  OP_UNSHARD_ALL,
  OP_UNSHARD_ANY,
  OP_ALLGATHER,
  OP_ALONE_ANY,
  OP_REDUCE_ALL,
  OP_REDUCE_ANY,
  NUM_OPS
};
static const char* const kOpNames[NUM_OPS] = {"unshard_collective", "unshard_one_sided",
                                              "allgather",          "unshard_one_rank_alone",
                                              "reduce_collective",  "reduce_at_boundary"};

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t all, any;
  float *shard, *full, *grad;
  size_t shard_n, numel;
} bench_t;

static double slowest(double dt) {
  double s = 0.0;
  MPI_Allreduce(&dt, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

static double time_op(bench_t* b, int op, int rank) {
  double dt = 0.0, t0 = 0.0;
  void* g = NULL;
  fsdp_unit_t u = op == OP_REDUCE_ALL || op == OP_UNSHARD_ALL ? b->all : b->any;
  switch (op) {
    case OP_UNSHARD_ALL:
    case OP_UNSHARD_ANY:
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      TRY(fsdp_unshard(u));
      dt = MPI_Wtime() - t0;
      TRY(fsdp_reshard(u));
      break;
    case OP_ALONE_ANY:
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) {
        t0 = MPI_Wtime();
        TRY(fsdp_unshard(u));
        dt = MPI_Wtime() - t0;
        TRY(fsdp_reshard(u));
      }
      break;
    case OP_ALLGATHER:
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      MPI_Allgather(b->shard, (int)b->shard_n, MPI_FLOAT, b->full, (int)b->shard_n, MPI_FLOAT,
                    MPI_COMM_WORLD);
      dt = MPI_Wtime() - t0;
      break;
    case OP_REDUCE_ALL:
    case OP_REDUCE_ANY:
      TRY(fsdp_zero_grads(u)); /* untimed: the step's start and its backward pass */
      TRY(fsdp_grad_data(u, 0, &g));
      memcpy(g, b->grad, b->numel * sizeof(float));
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      TRY(fsdp_reduce_grads(u));
      if (op == OP_REDUCE_ANY) TRY(fsdp_step_boundary(b->ctx));
      dt = MPI_Wtime() - t0;
      break;
  }
  return slowest(dt);
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* out_path = NULL;
  size_t max_bytes = (size_t)64 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
    if (!strcmp(argv[i], "--max")) max_bytes = (size_t)strtoull(argv[i + 1], NULL, 10);
  }
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.grad_reduction = FSDP_REDUCE_SUM;
  bench_t b;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &b.ctx));
  FILE* json = NULL;
  if (rank == 0) {
    json = out_path ? fopen(out_path, "w") : NULL;
    if (json)
      fprintf(json, "{\"benchmark\": \"any_ranks\", \"ranks\": %d, \"results\": [\n", world);
    printf("# Units used by any subset of ranks, %d ranks (default transport)\n\n", world);
    printf(
        "Seconds (median of the slowest rank). one-sided/collective: the ratio of the two "
        "unshards when every rank reads at once; boundary/collective: the local reduce plus "
        "fsdp_step_boundary against the collective reduce of the same gradient.\n\n");
    printf(
        "| size | unshard collective | unshard one-sided | MPI_Allgather | one rank alone | "
        "one-sided/collective | reduce collective | reduce + boundary | boundary/collective |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (size_t bytes = (size_t)64 << 10; bytes <= max_bytes; bytes *= 4) {
    b.numel = bytes / sizeof(float);
    b.shard_n = (b.numel + (size_t)world - 1) / (size_t)world;
    const int64_t shape[1] = {(int64_t)b.numel};
    fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
    b.shard = malloc(b.shard_n * sizeof(float));
    b.full = malloc(b.shard_n * (size_t)world * sizeof(float));
    b.grad = malloc(b.numel * sizeof(float));
    for (size_t i = 0; i < b.shard_n; ++i) b.shard[i] = 1.0f;
    for (size_t i = 0; i < b.shard_n * (size_t)world; ++i) b.full[i] = 0.0f;
    for (size_t i = 0; i < b.numel; ++i) b.grad[i] = 0.5f;
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    TRY(fsdp_unit_create_ex(b.ctx, 1, &d, NULL, &o, &b.all));
    o.used_by = FSDP_USED_BY_ANY_RANKS;
    TRY(fsdp_unit_create_ex(b.ctx, 1, &d, NULL, &o, &b.any));
    const int warmup = 3;
    int iters = (int)(((size_t)1 << 29) / bytes);
    iters = iters < 9 ? 9 : iters > 51 ? 51 : iters;
    double* t[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) t[op] = malloc(sizeof(double) * (size_t)iters);
    for (int it = -warmup; it < iters; ++it)
      for (int k = 0; k < NUM_OPS; ++k) {
        const int op = (k + it + warmup) % NUM_OPS;
        const double sec = time_op(&b, op, rank);
        if (it >= 0) t[op][it] = sec;
      }
    double med[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) med[op] = median(t[op], iters), free(t[op]);
    if (rank == 0) {
      printf("| %zu KiB | %.6f | %.6f | %.6f | %.6f | %.2f | %.6f | %.6f | %.2f |\n", bytes >> 10,
             med[OP_UNSHARD_ALL], med[OP_UNSHARD_ANY], med[OP_ALLGATHER], med[OP_ALONE_ANY],
             med[OP_UNSHARD_ANY] / med[OP_UNSHARD_ALL], med[OP_REDUCE_ALL], med[OP_REDUCE_ANY],
             med[OP_REDUCE_ANY] / med[OP_REDUCE_ALL]);
      fflush(stdout);
      if (json) {
        fprintf(json, "%s  {\"bytes\": %zu, \"iterations\": %d",
                bytes == (size_t)64 << 10 ? "" : ",\n", bytes, iters);
        for (int op = 0; op < NUM_OPS; ++op)
          fprintf(json, ", \"%s_s\": %.9f", kOpNames[op], med[op]);
        fprintf(json, "}");
      }
    }
    TRY(fsdp_unit_destroy(&b.all));
    TRY(fsdp_unit_destroy(&b.any));
    free(b.shard), free(b.full), free(b.grad);
  }
  if (json) fprintf(json, "\n]}\n"), fclose(json);
  TRY(fsdp_finalize(&b.ctx));
  MPI_Finalize();
  return 0;
}
