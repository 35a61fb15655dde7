/* fsdp_unshard and fsdp_reduce_grads against raw MPI_Allgather and MPI_Reduce_scatter_block of
 * the same bytes, in the same run: sizes 4 KiB to 256 MiB (the unsharded unit, float32), warm
 * buffers, library and raw interleaved (alternating which goes first), each iteration's time the
 * slowest rank's, medians reported. Bus bandwidth follows nccl-tests: size / time * (n-1)/n.
 * reduce_grads is timed as a training step uses it: after fsdp_zero_grads (which only marks the
 * gradient shard zero) and the gradient written, so it stores the reduced shard, as
 * MPI_Reduce_scatter_block does, rather than adding to it.
 *
 * usage: bench_collectives [--out FILE.json] [--min BYTES] [--max BYTES] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "fsdp.h"

enum { OP_UNSHARD, OP_ALLGATHER, OP_REDUCE, OP_REDUCE_SCATTER, NUM_OPS };

static float* filled(size_t n, float value) {
  float* p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "out of memory (%zu floats)\n", n);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < n; ++i) p[i] = value;
  return p;
}

typedef struct {
  fsdp_unit_t unit;
  float *shard, *full, *grad_in, *grad_out;
  size_t shard_n, numel;
} bench_t;

/* One timed run of `op`; returns the slowest rank's seconds. */
static double time_op(bench_t* b, int op) {
  void* g = NULL;
  if (op == OP_REDUCE) { /* untimed: a training step's start, and its backward pass */
    TRY(fsdp_zero_grads(b->unit));
    TRY(fsdp_grad_data(b->unit, 0, &g));
    memcpy(g, b->grad_in, b->numel * sizeof(float));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  switch (op) {
    case OP_UNSHARD: TRY(fsdp_unshard(b->unit)); break;
    case OP_ALLGATHER:
      MPI_Allgather(b->shard, (int)b->shard_n, MPI_FLOAT, b->full, (int)b->shard_n, MPI_FLOAT,
                    MPI_COMM_WORLD);
      break;
    case OP_REDUCE: TRY(fsdp_reduce_grads(b->unit)); break;
    case OP_REDUCE_SCATTER:
      MPI_Reduce_scatter_block(b->grad_in, b->grad_out, (int)b->shard_n, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      break;
  }
  double dt = MPI_Wtime() - t0, slowest = 0.0;
  if (op == OP_UNSHARD) TRY(fsdp_reshard(b->unit));
  MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* out_path = NULL;
  size_t min_bytes = 4096, max_bytes = (size_t)256 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
    if (!strcmp(argv[i], "--min")) min_bytes = (size_t)strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--max")) max_bytes = (size_t)strtoull(argv[i + 1], NULL, 10);
  }

  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  FILE* json = NULL;
  if (rank == 0) {
    char host[256] = "", mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    gethostname(host, sizeof host);
    MPI_Get_library_version(mpi_version, &len);
    mpi_version[strcspn(mpi_version, "\n")] = '\0';
    for (char* c = mpi_version; *c; ++c) /* JSON strings may hold no control characters */
      if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\') *c = ' ';
    json = out_path ? fopen(out_path, "w") : NULL;
    if (out_path && !json) fprintf(stderr, "cannot write %s\n", out_path);
    const time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (json)
      fprintf(json,
              "{\n  \"benchmark\": \"collectives\",\n  \"date\": \"%s\",\n  \"machine\": "
              "{\"host\": \"%s\", \"cpus_online\": %ld, \"mpi\": \"%s\"},\n  \"ranks\": %d,\n"
              "  \"dtype\": \"float32\",\n  \"statistic\": \"median of per-iteration slowest-rank "
              "time\",\n  \"results\": [\n",
              date, host, sysconf(_SC_NPROCESSORS_ONLN), mpi_version, world);
    printf("# libfsdp collectives, %d ranks, %s (%ld CPUs), %s\n\n", world, host,
           sysconf(_SC_NPROCESSORS_ONLN), mpi_version);
    printf(
        "| size | unshard s | MPI_Allgather s | ratio | reduce_grads s | "
        "MPI_Reduce_scatter_block s | ratio | busbw lib/raw GB/s (ag; rs) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---|\n");
  }

  int first_row = 1;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    bench_t b;
    const size_t numel = bytes / sizeof(float);
    const int64_t shape[1] = {(int64_t)numel};
    fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
    b.numel = numel;
    b.shard_n = (numel + (size_t)world - 1) / (size_t)world;
    const size_t padded = b.shard_n * (size_t)world;
    /* Every buffer written before use: an untouched calloc'd buffer maps the kernel's shared zero
     * page, which MPI would read from cache, a speed no training buffer has. */
    b.shard = filled(b.shard_n, 1.0f + rank);
    b.full = filled(padded, 0.0f);
    b.grad_in = filled(padded, 0.5f);
    b.grad_out = filled(b.shard_n, 0.0f);
    const void* values[1] = {b.grad_in};
    TRY(fsdp_unit_create(ctx, 1, &d, values, &b.unit));
    size_t lib_shard_n = 0;
    TRY(fsdp_unit_numel(b.unit, NULL, NULL, &lib_shard_n));
    if (lib_shard_n != b.shard_n) {
      fprintf(stderr, "shard of %zu elements, expected %zu\n", lib_shard_n, b.shard_n);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int warmup = 3;
    int iters = (int)(((size_t)1 << 30) / bytes);
    iters = iters < 9 ? 9 : iters > 51 ? 51 : iters;
    double* t[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) t[op] = malloc(sizeof(double) * (size_t)iters);
    for (int it = -warmup; it < iters; ++it) {
      for (int k = 0; k < NUM_OPS; ++k) {
        /* Alternate which of each (library, raw) pair runs first. */
        const int op = (it & 1) ? (k ^ 1) : k;
        const double s = time_op(&b, op);
        if (it >= 0) t[op][it] = s;
      }
    }
    double med[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) med[op] = median(t[op], iters), free(t[op]);
    const double factor = (double)(world - 1) / world, sz = (double)padded * sizeof(float);
    if (rank == 0) {
      const double ag_ratio = med[OP_UNSHARD] / med[OP_ALLGATHER];
      const double rs_ratio = med[OP_REDUCE] / med[OP_REDUCE_SCATTER];
      printf("| %zu KiB | %.6f | %.6f | %.3f | %.6f | %.6f | %.3f | %.2f/%.2f; %.2f/%.2f |\n",
             bytes >> 10, med[OP_UNSHARD], med[OP_ALLGATHER], ag_ratio, med[OP_REDUCE],
             med[OP_REDUCE_SCATTER], rs_ratio, sz / med[OP_UNSHARD] * factor / 1e9,
             sz / med[OP_ALLGATHER] * factor / 1e9, sz / med[OP_REDUCE] * factor / 1e9,
             sz / med[OP_REDUCE_SCATTER] * factor / 1e9);
      fflush(stdout);
      if (json)
        fprintf(json,
                "%s    {\"bytes\": %zu, \"iterations\": %d, \"unshard_s\": %.9f, "
                "\"allgather_s\": %.9f, \"unshard_ratio\": %.4f, \"reduce_grads_s\": %.9f, "
                "\"reduce_scatter_s\": %.9f, \"reduce_grads_ratio\": %.4f, "
                "\"unshard_busbw_GBps\": %.4f, \"allgather_busbw_GBps\": %.4f, "
                "\"reduce_grads_busbw_GBps\": %.4f, \"reduce_scatter_busbw_GBps\": %.4f}",
                first_row ? "" : ",\n", bytes, iters, med[OP_UNSHARD], med[OP_ALLGATHER], ag_ratio,
                med[OP_REDUCE], med[OP_REDUCE_SCATTER], rs_ratio,
                sz / med[OP_UNSHARD] * factor / 1e9, sz / med[OP_ALLGATHER] * factor / 1e9,
                sz / med[OP_REDUCE] * factor / 1e9, sz / med[OP_REDUCE_SCATTER] * factor / 1e9);
    }
    first_row = 0;
    TRY(fsdp_unit_destroy(&b.unit));
    TRY(fsdp_trim_pool(ctx));
    free(b.shard), free(b.full), free(b.grad_in), free(b.grad_out);
  }
  if (json) {
    fprintf(json, "\n  ]\n}\n");
    fclose(json);
  }
  TRY(fsdp_finalize(&ctx));
  MPI_Finalize();
  return 0;
}
