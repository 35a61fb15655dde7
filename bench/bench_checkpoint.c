/* Checkpoint save and load throughput against raw POSIX I/O of the same bytes, in the same run.
 *
 *   bench_checkpoint <dir> <model MiB> <parameters> <repetitions> [--pitfalls]
 *
 * Raw baseline: every rank pwrite()s its share of the bytes to its own contiguous region of one
 * file, then fsync (and preads it back): sequential POSIX I/O at the same parallelism. Library:
 * fsdp_checkpoint_save of a model of that many bytes (float32 parameters of equal size, model
 * only), fsdp_checkpoint_load into the same unit layout and into another one (resharding), and
 * fsdp_checkpoint_save_async (the time the call blocks, then the whole save). Medians after one
 * warm-up of the slowest rank's time. --pitfalls also times the parallel-HDF5 settings the
 * library avoids: fill values (FSDP_CKPT_FILL_TIME=alloc), ROMIO's collective write instead of
 * each rank's pwrite (FSDP_CKPT_DATA_IO=collective), and the structure created by every writer
 * with parallel HDF5 and collective metadata (FSDP_CKPT_METADATA=collective) instead of by rank 0
 * alone. Prints one markdown row and one JSON line. */
#include <dirent.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#define MAX_REPS 16

static int rank, size;

static double slowest(double t) {
  double m = 0;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t* units;
  int nunits;
} model_t;

/* nparams parameters "p00000".. of numel elements, `per_unit` per unit, the first unit holding
 * `first` of them (another grouping: another shard layout for the same parameters). */
static void build(model_t* m, int nparams, int64_t numel, int per_unit, int first) {
  TRY(fsdp_init(MPI_COMM_WORLD, NULL, &m->ctx));
  m->units = calloc((size_t)nparams, sizeof *m->units);
  m->nunits = 0;
  char(*names)[16] = malloc((size_t)nparams * 16);
  fsdp_param_desc_t* d = calloc((size_t)nparams, sizeof *d);
  for (int p = 0; p < nparams; ++p) {
    snprintf(names[p], 16, "p%05d", p);
    d[p].name = names[p], d[p].ndim = 1, d[p].shape = &numel;
    d[p].dtype = FSDP_FLOAT32, d[p].requires_grad = 1;
  }
  for (int p = 0; p < nparams;) {
    const int n = m->nunits == 0 ? first : (nparams - p < per_unit ? nparams - p : per_unit);
    TRY(fsdp_unit_create(m->ctx, n, d + p, NULL, &m->units[m->nunits]));
    float* s = NULL;
    size_t sn = 0;
    TRY(fsdp_shard_data(m->units[m->nunits], (void**)&s, &sn));
    for (size_t e = 0; e < sn; ++e) s[e] = (float)((e * 7 + (size_t)p) % 1000) * 0.001f;
    ++m->nunits, p += n;
  }
  free(names), free(d);
}

static void destroy(model_t* m) {
  for (int u = 0; u < m->nunits; ++u) TRY(fsdp_unit_destroy(&m->units[u]));
  TRY(fsdp_finalize(&m->ctx));
  free(m->units);
}

static double raw_io(const char* path, char* buf, size_t bytes, int write) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  if (write && rank == 0) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    close(fd);
  }
  if (write) MPI_Barrier(MPI_COMM_WORLD);
  int fd = open(path, write ? O_WRONLY : O_RDONLY);
  const off_t base = (off_t)bytes * rank;
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = write ? pwrite(fd, buf + done, bytes - done, base + (off_t)done)
                            : pread(fd, buf + done, bytes - done, base + (off_t)done);
    if (n <= 0) MPI_Abort(MPI_COMM_WORLD, 2);
    done += (size_t)n;
  }
  if (write) fsync(fd);
  close(fd);
  return slowest(MPI_Wtime() - t0);
}

/* The crash-safe form of the raw write, which any save that keeps the previous file intact must
 * use: a new file (`path`.tmp), pwrite of every rank's share, fsync, then rank 0 renames it over
 * `path` and fsyncs the directory (the replaced file unlinked after the timing, as the save
 * leaves it to a background thread). On a thin-provisioned disk (this machine's) a new file's
 * blocks cost more than rewriting blocks a truncated file just freed, so this is the save's own
 * floor. */
static double raw_atomic_write(const char* path, char* buf, size_t bytes) {
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  if (rank == 0) close(open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644));
  MPI_Barrier(MPI_COMM_WORLD);
  int fd = open(tmp, O_WRONLY);
  const off_t base = (off_t)bytes * rank;
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = pwrite(fd, buf + done, bytes - done, base + (off_t)done);
    if (n <= 0) MPI_Abort(MPI_COMM_WORLD, 2);
    done += (size_t)n;
  }
  fsync(fd);
  close(fd);
  MPI_Barrier(MPI_COMM_WORLD);
  char prev[720];
  snprintf(prev, sizeof prev, "%s.prev", path);
  if (rank == 0) { /* the replaced file keeps a name until after the timing, as the save does */
    link(path, prev);
    rename(tmp, path);
    char dir[700];
    snprintf(dir, sizeof dir, "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int d = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
    fsync(d);
    close(d);
  }
  const double t = slowest(MPI_Wtime() - t0);
  if (rank == 0) unlink(prev);
  return t;
}

/* Reads are measured from the disk, not from the page cache that the writes just filled: rank 0
 * drops the cache (needs root; cold = 0 in the output otherwise). */
static int cold = 1;
static void drop_caches(void) {
  if (rank == 0) {
    sync();
    FILE* f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f || fputs("1\n", f) < 0) cold = 0;
    if (f) fclose(f);
  }
  MPI_Bcast(&cold, 1, MPI_INT, 0, MPI_COMM_WORLD);
}

/* The save replaces the previous file, which a background thread unlinks just after the call
 * (<path>.prev-*, doc/checkpoint-format.md); the next measurement waits for that, untimed, so
 * that it is not charged to whatever runs next. */
static void wait_for_unlink(const char* path) {
  if (rank == 0) {
    char dir[700], prefix[700];
    snprintf(dir, sizeof dir, "%s", path);
    char* slash = strrchr(dir, '/');
    snprintf(prefix, sizeof prefix, "%s.prev-", slash ? slash + 1 : path);
    if (slash) *slash = '\0';
    for (int i = 0; i < 200; ++i) {
      DIR* d = opendir(slash ? dir : ".");
      int left = 0;
      for (struct dirent* e; d && (e = readdir(d));)
        left += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
      if (d) closedir(d);
      if (!left) break;
      usleep(50000);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static double timed_save(model_t* m, const char* path) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  TRY(fsdp_checkpoint_save(m->ctx, path, NULL));
  const double t = slowest(MPI_Wtime() - t0);
  wait_for_unlink(path);
  return t;
}

static double timed_load(model_t* m, const char* path) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  TRY(fsdp_checkpoint_load(m->ctx, path, NULL, NULL));
  return slowest(MPI_Wtime() - t0);
}

int main(int argc, char** argv) {
  int provided = 0; /* a progress thread for the background save */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 5) {
    if (rank == 0)
      fprintf(stderr, "usage: bench_checkpoint <dir> <MiB> <params> <reps> [--pitfalls]\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const char* dir = argv[1];
  const size_t mib = (size_t)atol(argv[2]);
  const int nparams = atoi(argv[3]);
  int reps = atoi(argv[4]);
  reps = reps < 1 ? 1 : reps > MAX_REPS ? MAX_REPS : reps;
  const int pitfalls = argc > 5 && strcmp(argv[5], "--pitfalls") == 0;
  const size_t total = mib << 20;
  const int64_t numel = (int64_t)(total / 4 / (size_t)nparams);
  const size_t bytes = (size_t)numel * 4 * (size_t)nparams;
  const int per_unit = nparams > 100 ? 100 : 1;
  char raw[600], ckpt[600], atomic[600];
  snprintf(raw, sizeof raw, "%s/raw.bin", dir);
  snprintf(atomic, sizeof atomic, "%s/raw-atomic.bin", dir);
  snprintf(ckpt, sizeof ckpt, "%s/bench.h5", dir);

  model_t a, b;
  build(&a, nparams, numel, per_unit, per_unit);
  build(&b, nparams, numel, per_unit > 1 ? per_unit + 7 : 2, per_unit > 1 ? 13 : 1);
  const size_t share = bytes / (size_t)size;
  char* buf = malloc(share);
  for (size_t i = 0; i < share; ++i) buf[i] = (char)(i * 31);

  double t[9][MAX_REPS];
  for (int r = -1; r < reps; ++r) { /* r = -1: warm-up */
    double v[9];
    /* The raw write, the crash-safe raw write and the save take turns going first: on this
     * machine's disk a large write right after another one often runs up to 3x slower (the same
     * save took 5.7 s after the raw write and 2.5 s before it), and a fixed order would charge
     * that to one side. */
    for (int k = 0; k < 3; ++k) {
      const int which = (k + (r < 0 ? 0 : r)) % 3;
      if (which == 0) v[0] = raw_io(raw, buf, share, 1);
      if (which == 1) v[7] = raw_atomic_write(atomic, buf, share);
      if (which == 2) v[1] = timed_save(&a, ckpt);
    }
    drop_caches();
    v[2] = raw_io(raw, buf, share, 0);
    drop_caches();
    v[3] = timed_load(&a, ckpt);
    drop_caches();
    v[4] = timed_load(&b, ckpt);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fsdp_request_t req = NULL;
    TRY(fsdp_checkpoint_save_async(a.ctx, ckpt, NULL, &req));
    v[5] = slowest(MPI_Wtime() - t0);
    TRY(fsdp_wait(&req));
    v[6] = slowest(MPI_Wtime() - t0);
    wait_for_unlink(ckpt);
    v[8] = 0;
    for (int k = 0; r >= 0 && k < 9; ++k) t[k][r] = v[k];
  }
  double med[9];
  for (int k = 0; k < 9; ++k) med[k] = median(t[k], reps);
  double pit[3] = {0, 0, 0};
  if (pitfalls) {
    const char* env[3][2] = {{"FSDP_CKPT_FILL_TIME", "alloc"},
                             {"FSDP_CKPT_DATA_IO", "collective"},
                             {"FSDP_CKPT_METADATA", "collective"}};
    for (int k = 0; k < 3; ++k) {
      double v[MAX_REPS];
      setenv(env[k][0], env[k][1], 1);
      timed_save(&a, ckpt);
      for (int r = 0; r < reps; ++r) v[r] = timed_save(&a, ckpt);
      unsetenv(env[k][0]);
      pit[k] = median(v, reps);
    }
  }
  const double gib = (double)bytes / (1 << 30);
  if (rank == 0) {
    printf(
        "| %5zu MiB | %5d | %d | %.2f | %.2f | %.2f | **%.2f** | **%.2f** | %.2f | %.2f | **%.2f** "
        "| "
        "%.2f | **%.2f** | %.3f s / %.3f s = **%.1f%%** |",
        mib, nparams, size, gib / med[0], gib / med[7], gib / med[1], med[0] / med[1],
        med[7] / med[1], gib / med[2], gib / med[3], med[2] / med[3], gib / med[4], med[3] / med[4],
        med[5], med[1], 100 * med[5] / med[1]);
    if (pitfalls)
      printf(
          " fill=alloc %.2fx, collective MPI-IO %.2fx, parallel HDF5 collective metadata %.2fx |",
          pit[0] / med[1], pit[1] / med[1], pit[2] / med[1]);
    printf("\n");
    fprintf(stderr,
            "{\"bench\": \"checkpoint\", \"cold_reads\": %d, \"mib\": %zu, \"params\": %d, "
            "\"ranks\": %d, \"reps\": %d, "
            "\"raw_write_s\": %.6f, \"raw_atomic_write_s\": %.6f, \"save_s\": %.6f, "
            "\"raw_read_s\": %.6f, \"load_s\": %.6f, "
            "\"reshard_load_s\": %.6f, \"async_block_s\": %.6f, \"async_total_s\": %.6f, "
            "\"fill_alloc_save_s\": %.6f, \"collective_io_save_s\": %.6f, "
            "\"per_rank_metadata_save_s\": %.6f}\n",
            cold, mib, nparams, size, reps, med[0], med[7], med[1], med[2], med[3], med[4], med[5],
            med[6], pit[0], pit[1], pit[2]);
  }
  remove(ckpt), remove(raw), remove(atomic);
  free(buf);
  destroy(&a), destroy(&b);
  MPI_Finalize();
  return 0;
}
