/* fsdp_unshard and fsdp_reduce_grads on each host transport (node shared memory, its zero-copy
 * storage, plain MPI)
 * against raw MPI_Allgather and MPI_Reduce_scatter_block of the same bytes and against the
 * physical limit (one memcpy of the unsharded bytes per rank) and the shared-memory algorithm's
 * own data movement written without the library (the ceilings), in the same run: sizes 4 KiB to
 * 256 MiB (the unsharded unit, float32), warm buffers, the operations interleaved in an order
 * that rotates every iteration, each iteration's time the slowest rank's, medians reported. Bus
 * bandwidth follows nccl-tests: size / time * (n-1)/n. reduce_grads is timed as a training step
 * uses it: after fsdp_zero_grads (which only marks the gradient shard zero) and the gradient
 * written, so it stores the reduced shard, as MPI_Reduce_scatter_block does.
 * Then the node memory that unsharded buffers take, measured: the growth of the node's
 * proportional set size (Pss, /proc/self/smaps_rollup, summed over the node's ranks; shared pages
 * count once) while 4 units of --node-mib MiB are unsharded, for each transport.
 *
 * usage: bench_collectives [--out FILE.json] [--min BYTES] [--max BYTES] [--node-mib N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "fsdp.h"

enum {
  OP_UNSHARD_SHM,
  OP_UNSHARD_ZERO_COPY,
  OP_UNSHARD_MPI,
  OP_ALLGATHER,
  OP_MEMCPY,
  OP_REDUCE_SHM,
  OP_REDUCE_MPI,
  OP_REDUCE_SCATTER,
  OP_COPY_SHARD,
  OP_SUM_BLOCKS,
  NUM_OPS
};
static const char* const kOpNames[NUM_OPS] = {
    "unshard_shm",      "unshard_zero_copy", "unshard_mpi",      "allgather",
    "memcpy",           "reduce_grads_shm",  "reduce_grads_mpi", "reduce_scatter",
    "copy_shard_bound", "sum_blocks_bound"};

/* The prescribed reduce's own data movement, with no library around it: every rank has written
 * its gradient into its part of a node-shared window (untimed, as a backward pass would), and
 * sums its block across the node's ranks into out: its own block first, then the next ranks' in
 * ring order. Peers' blocks come from their caches or memory, as they do for the library. */
static void sum_blocks(float* out, float* const* team, size_t at, size_t block, int rank, int n) {
  const float* a = team[rank] + at;
  const float* b = team[(rank + 1) % n] + at;
  for (size_t i = 0; i < block; ++i) out[i] = a[i] + b[i];
  for (int k = 2; k < n; ++k) {
    const float* c = team[(rank + k) % n] + at;
    for (size_t i = 0; i < block; ++i) out[i] += c[i];
  }
}

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
  fsdp_unit_t shm, zero_copy, mpi; /* the same unit on a context of each transport */
  float *shard, *full, *grad_in, *grad_out, *copy;
  float *copy_out, *sum_out; /* the ceilings' outputs: each as cold between its runs as a unit's */
  float** team; /* each node rank's gradient, in a node-shared window (the reduce's ceiling) */
  size_t shard_n, numel;
  int rank, world, node_rank, node_size;
} bench_t;

static double reduce_unit(fsdp_unit_t u, const float* grad, size_t numel) {
  void* g = NULL;
  TRY(fsdp_zero_grads(u)); /* untimed: a training step's start, and its backward pass */
  TRY(fsdp_grad_data(u, 0, &g));
  memcpy(g, grad, numel * sizeof(float));
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  TRY(fsdp_reduce_grads(u));
  return MPI_Wtime() - t0;
}

static double unshard_unit(fsdp_unit_t u) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  TRY(fsdp_unshard(u));
  const double dt = MPI_Wtime() - t0;
  TRY(fsdp_reshard(u));
  return dt;
}

/* One timed run of `op`; returns the slowest rank's seconds. */
static double time_op(bench_t* b, int op) {
  double dt = 0.0, t0 = 0.0;
  switch (op) {
    case OP_UNSHARD_SHM: dt = unshard_unit(b->shm); break;
    case OP_UNSHARD_ZERO_COPY: dt = unshard_unit(b->zero_copy); break;
    case OP_UNSHARD_MPI: dt = unshard_unit(b->mpi); break;
    case OP_REDUCE_SHM: dt = reduce_unit(b->shm, b->grad_in, b->numel); break;
    case OP_REDUCE_MPI: dt = reduce_unit(b->mpi, b->grad_in, b->numel); break;
    case OP_ALLGATHER:
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      MPI_Allgather(b->shard, (int)b->shard_n, MPI_FLOAT, b->full, (int)b->shard_n, MPI_FLOAT,
                    MPI_COMM_WORLD);
      dt = MPI_Wtime() - t0;
      break;
    case OP_MEMCPY: /* the limit: every rank copies the unsharded bytes once */
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      memcpy(b->copy, b->grad_in, b->numel * sizeof(float));
      dt = MPI_Wtime() - t0;
      break;
    case OP_COPY_SHARD: /* the prescribed unshard's only data movement: each rank writes its block
                         */
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      memcpy(b->copy_out + (size_t)b->rank * b->shard_n, b->shard, b->shard_n * sizeof(float));
      dt = MPI_Wtime() - t0;
      break;
    case OP_SUM_BLOCKS: /* the prescribed reduce's: each rank reads n blocks and writes one */
      memcpy(b->team[b->node_rank], b->grad_in, b->shard_n * (size_t)b->world * sizeof(float));
      __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the peers read it after the barrier */
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      sum_blocks(b->sum_out, b->team, (size_t)b->rank * b->shard_n, b->shard_n, b->node_rank,
                 b->node_size);
      dt = MPI_Wtime() - t0;
      break;
    case OP_REDUCE_SCATTER:
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      MPI_Reduce_scatter_block(b->grad_in, b->grad_out, (int)b->shard_n, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      dt = MPI_Wtime() - t0;
      break;
  }
  double slowest = 0.0;
  MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

static fsdp_context_t make_context(fsdp_transport_t t) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = t;
  cfg.max_unsharded = 8;
  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  return ctx;
}

/* This process's proportional set size in bytes (shared pages divided among their mappers). */
static double pss_bytes(void) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1.0;
  char line[256];
  double kb = -1.0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Pss: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024.0;
}

/* Node memory of 4 units of `mib` MiB on a fresh context of transport `t` (no buffer cached from
 * earlier), as Pss growth summed over the node's ranks: out[0] their shards (creation), out[1]
 * their unsharded buffers (all 4 unsharded). */
static void node_bytes(fsdp_transport_t t, size_t mib, MPI_Comm node, double out[2]) {
  fsdp_context_t ctx = make_context(t);
  enum { N = 4 };
  const int64_t shape[1] = {(int64_t)(mib << 20) / 4};
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u[N];
  TRY(fsdp_trim_pool(ctx));
  MPI_Barrier(MPI_COMM_WORLD);
  double grown[2], at = pss_bytes();
  for (int k = 0; k < N; ++k) TRY(fsdp_unit_create(ctx, 1, &d, NULL, &u[k]));
  TRY(fsdp_trim_pool(ctx));
  MPI_Barrier(MPI_COMM_WORLD);
  grown[0] = pss_bytes() - at;
  at = pss_bytes();
  for (int k = 0; k < N; ++k) TRY(fsdp_unshard(u[k]));
  MPI_Barrier(MPI_COMM_WORLD);
  grown[1] = pss_bytes() - at;
  MPI_Allreduce(grown, out, 2, MPI_DOUBLE, MPI_SUM, node);
  for (int k = 0; k < N; ++k) TRY(fsdp_reshard(u[k]));
  for (int k = 0; k < N; ++k) TRY(fsdp_unit_destroy(&u[k]));
  TRY(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* out_path = NULL;
  size_t min_bytes = 4096, max_bytes = (size_t)256 << 20, node_mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
    if (!strcmp(argv[i], "--min")) min_bytes = (size_t)strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--max")) max_bytes = (size_t)strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--node-mib")) node_mib = (size_t)strtoull(argv[i + 1], NULL, 10);
  }

  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_ranks = 1, node_rank = 0;
  MPI_Comm_size(node, &node_ranks);
  MPI_Comm_rank(node, &node_rank);
  fsdp_context_t shm = make_context(FSDP_TRANSPORT_SHM), mpi = make_context(FSDP_TRANSPORT_MPI);
  fsdp_context_t zero_copy = make_context(FSDP_TRANSPORT_SHM_ZERO_COPY);
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
        "Seconds (median, slowest rank); speedup = raw MPI time / shm time; ceiling = raw MPI "
        "time / the time of the shm algorithm's data movement alone, written without the "
        "library (every rank copying its block; every rank summing its slice of the n blocks "
        "its node peers wrote into a shared window just before), the most any implementation "
        "of it could reach. zero-copy: FSDP_TRANSPORT_SHM_ZERO_COPY, whose unshard moves no bytes "
        "(the shards live in the node's copy; reduce_grads is shm's).\n\n");
    printf(
        "| size | unshard shm | unshard zero-copy | unshard mpi | MPI_Allgather | memcpy | "
        "speedup shm | ceiling | speedup zero-copy | reduce shm | reduce mpi | "
        "MPI_Reduce_scatter_block | speedup | ceiling | busbw GB/s shm/mpi/raw (ag; rs) |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  }

  int first_row = 1;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    bench_t b;
    const size_t numel = bytes / sizeof(float);
    const int64_t shape[1] = {(int64_t)numel};
    fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
    b.numel = numel;
    b.rank = rank;
    b.world = world;
    b.shard_n = (numel + (size_t)world - 1) / (size_t)world;
    const size_t padded = b.shard_n * (size_t)world;
    /* Every buffer written before use: an untouched calloc'd buffer maps the kernel's shared zero
     * page, which MPI would read from cache, a speed no training buffer has. */
    b.shard = filled(b.shard_n, 1.0f + rank);
    b.full = filled(padded, 0.0f);
    b.grad_in = filled(padded, 0.5f);
    b.grad_out = filled(b.shard_n, 0.0f);
    b.copy_out = filled(padded, 0.0f);
    b.sum_out = filled(b.shard_n, 0.0f);
    b.copy = filled(padded, 0.0f);
    b.node_rank = node_rank;
    b.node_size = node_ranks;
    MPI_Win team_win = MPI_WIN_NULL;
    float* mine = NULL;
    MPI_Win_allocate_shared((MPI_Aint)(padded * sizeof(float)), sizeof(float), MPI_INFO_NULL, node,
                            &mine, &team_win);
    b.team = malloc(sizeof(float*) * (size_t)node_ranks);
    for (int j = 0; j < node_ranks; ++j) {
      MPI_Aint size = 0;
      int unit = 0;
      MPI_Win_shared_query(team_win, j, &size, &unit, &b.team[j]);
    }
    memcpy(mine, b.grad_in, padded * sizeof(float)); /* mapped and written before use */
    const void* values[1] = {b.grad_in};
    TRY(fsdp_unit_create(shm, 1, &d, values, &b.shm));
    TRY(fsdp_unit_create(zero_copy, 1, &d, values, &b.zero_copy));
    TRY(fsdp_unit_create(mpi, 1, &d, values, &b.mpi));
    const int warmup = 3;
    int iters = (int)(((size_t)1 << 30) / bytes);
    iters = iters < 9 ? 9 : iters > 51 ? 51 : iters;
    double* t[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) t[op] = malloc(sizeof(double) * (size_t)iters);
    for (int it = -warmup; it < iters; ++it)
      for (int k = 0; k < NUM_OPS; ++k) { /* the order rotates: no operation always goes first */
        const int op = (k + it + warmup) % NUM_OPS;
        const double sec = time_op(&b, op);
        if (it >= 0) t[op][it] = sec;
      }
    double med[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) med[op] = median(t[op], iters), free(t[op]);
    const double factor = (double)(world - 1) / world, sz = (double)padded * sizeof(float);
    double busbw[NUM_OPS];
    for (int op = 0; op < NUM_OPS; ++op) busbw[op] = sz / med[op] * factor / 1e9;
    if (rank == 0) {
      const double ag_speedup = med[OP_ALLGATHER] / med[OP_UNSHARD_SHM];
      const double zc_speedup = med[OP_ALLGATHER] / med[OP_UNSHARD_ZERO_COPY];
      const double rs_speedup = med[OP_REDUCE_SCATTER] / med[OP_REDUCE_SHM];
      const double ag_ceiling = med[OP_ALLGATHER] / med[OP_COPY_SHARD];
      const double rs_ceiling = med[OP_REDUCE_SCATTER] / med[OP_SUM_BLOCKS];
      printf(
          "| %zu KiB | %.6f | %.6f | %.6f | %.6f | %.6f | %.2fx | %.2fx | %.2fx | %.6f | %.6f | "
          "%.6f | %.2fx | %.2fx | %.2f/%.2f/%.2f; %.2f/%.2f/%.2f |\n",
          bytes >> 10, med[OP_UNSHARD_SHM], med[OP_UNSHARD_ZERO_COPY], med[OP_UNSHARD_MPI],
          med[OP_ALLGATHER], med[OP_MEMCPY], ag_speedup, ag_ceiling, zc_speedup, med[OP_REDUCE_SHM],
          med[OP_REDUCE_MPI], med[OP_REDUCE_SCATTER], rs_speedup, rs_ceiling, busbw[OP_UNSHARD_SHM],
          busbw[OP_UNSHARD_MPI], busbw[OP_ALLGATHER], busbw[OP_REDUCE_SHM], busbw[OP_REDUCE_MPI],
          busbw[OP_REDUCE_SCATTER]);
      fflush(stdout);
      if (json) {
        fprintf(json, "%s    {\"bytes\": %zu, \"iterations\": %d", first_row ? "" : ",\n", bytes,
                iters);
        for (int op = 0; op < NUM_OPS; ++op)
          fprintf(json, ", \"%s_s\": %.9f, \"%s_busbw_GBps\": %.4f", kOpNames[op], med[op],
                  kOpNames[op], busbw[op]);
        fprintf(json,
                ", \"unshard_speedup_vs_allgather\": %.4f, "
                "\"unshard_zero_copy_speedup_vs_allgather\": %.4f, "
                "\"reduce_speedup_vs_reduce_scatter\": %.4f, "
                "\"unshard_ceiling_vs_allgather\": %.4f, "
                "\"reduce_ceiling_vs_reduce_scatter\": %.4f}",
                ag_speedup, zc_speedup, rs_speedup, ag_ceiling, rs_ceiling);
      }
    }
    first_row = 0;
    TRY(fsdp_unit_destroy(&b.shm));
    TRY(fsdp_unit_destroy(&b.zero_copy));
    TRY(fsdp_unit_destroy(&b.mpi));
    TRY(fsdp_trim_pool(shm));
    TRY(fsdp_trim_pool(mpi));
    free(b.shard), free(b.full), free(b.grad_in), free(b.grad_out), free(b.copy_out),
        free(b.sum_out), free(b.copy), free(b.team);
    MPI_Win_free(&team_win);
  }

  TRY(fsdp_finalize(&shm));
  TRY(fsdp_finalize(&zero_copy));
  TRY(fsdp_finalize(&mpi));
  double node_shm[2], node_zc[2], node_mpi[2]; /* shards, unsharded buffers */
  node_bytes(FSDP_TRANSPORT_SHM, node_mib, node, node_shm);
  node_bytes(FSDP_TRANSPORT_SHM_ZERO_COPY, node_mib, node, node_zc);
  node_bytes(FSDP_TRANSPORT_MPI, node_mib, node, node_mpi);
  MPI_Comm_free(&node);
  if (rank == 0) {
    const double mib = 1048576.0;
    printf(
        "\n## Node memory of 4 unsharded %zu MiB units (Pss growth summed over the node's %d "
        "ranks)\n\n| | shm | zero-copy | mpi | mpi / shm |\n|---|---:|---:|---:|---:|\n"
        "| unsharded buffers | %.1f MiB | %.1f MiB | %.1f MiB | %.2f |\n"
        "| shards + unsharded | %.1f MiB | %.1f MiB | %.1f MiB | %.2f |\n\n",
        node_mib, node_ranks, node_shm[1] / mib, node_zc[1] / mib, node_mpi[1] / mib,
        node_mpi[1] / node_shm[1], (node_shm[0] + node_shm[1]) / mib,
        (node_zc[0] + node_zc[1]) / mib, (node_mpi[0] + node_mpi[1]) / mib,
        (node_mpi[0] + node_mpi[1]) / (node_shm[0] + node_shm[1]));
    if (json) {
      fprintf(json,
              "\n  ],\n  \"node_memory\": {\"units\": 4, \"unit_bytes\": %zu, \"node_ranks\": %d, "
              "\"shm_bytes\": %.0f, \"zero_copy_bytes\": %.0f, \"mpi_bytes\": %.0f, "
              "\"reduction\": %.4f, \"shard_bytes\": {\"shm\": %.0f, \"zero_copy\": %.0f, "
              "\"mpi\": %.0f}}\n}\n",
              node_mib << 20, node_ranks, node_shm[1], node_zc[1], node_mpi[1],
              node_mpi[1] / node_shm[1], node_shm[0], node_zc[0], node_mpi[0]);
      fclose(json);
    }
  }
  MPI_Finalize();
  return 0;
}
