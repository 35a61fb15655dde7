// Raw file I/O, no libfsdp: why several processes saving into one file can be slower than each
// saving its own (doc/checkpoint-format.md, "Save speed"). N processes (fork) write TOTAL bytes,
// each a disjoint contiguous range, either into one file (created and sized first, as a
// checkpoint's HDF5 structure is: sparse, or fallocated) or into one new file each (as PyTorch
// DCP's ranks do), with
//   buffered  pwrite of 64 MiB chunks, then fsync
//   wbstart   the same with sync_file_range(WRITE) after each chunk (libfsdp's buffered writer)
//   chunksync pwrite + fdatasync per chunk
//   direct    O_DIRECT pwrite of 64 MiB chunks from page-aligned memory, then fsync
// Each trial is timed from before the file is created to the last process's fsync; the files are
// removed outside the timing. Trials run in rounds, the order of the configurations reversed every
// other round (a write right after another one can be slower), and each is reported as the median.
//
//   bench_file_io DIR [TOTAL_MIB=1024] [REPS=5] [PROCS=1,2,4]
//
// Prints a markdown table; one JSON line per configuration to stderr.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64ull << 20)
#define ALIGN 4096ull

enum method { BUFFERED, WBSTART, CHUNKSYNC, DIRECT, NMETHODS };
static const char* method_name[] = {"buffered", "wbstart", "chunksync", "direct"};
enum layout { SHARED_SPARSE, SHARED_FALLOC, SEPARATE, NLAYOUTS };
static const char* layout_name[] = {"one file (sparse)", "one file (fallocated)",
                                    "one file each (new)"};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char* what, const char* path) {
  fprintf(stderr, "bench_file_io: %s '%s': %s\n", what, path, strerror(errno));
  _exit(2);
}

static void write_fully(int fd, const char* p, uint64_t n, uint64_t off, const char* path) {
  while (n) {
    const ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("pwrite", path);
    p += w, n -= (uint64_t)w, off += (uint64_t)w;
  }
}

// One process's share: [off, off + bytes) of path. Returns the seconds its writes took before the
// fsync (from t0).
static double child(const char* path, int create, enum method m, uint64_t off, uint64_t bytes,
                    const char* buf, double t0) {
  int flags = O_WRONLY | (create ? O_CREAT | O_TRUNC : 0) | (m == DIRECT ? O_DIRECT : 0);
  const int fd = open(path, flags, 0644);
  if (fd < 0) die("open", path);
  for (uint64_t done = 0; done < bytes; done += CHUNK) {
    const uint64_t n = bytes - done < CHUNK ? bytes - done : CHUNK;
    write_fully(fd, buf, n, off + done, path);
    if (m == WBSTART) sync_file_range(fd, (off64_t)(off + done), (off64_t)n, SYNC_FILE_RANGE_WRITE);
    if (m == CHUNKSYNC && fdatasync(fd) != 0) die("fdatasync", path);
  }
  const double written = now() - t0;
  if (fsync(fd) != 0) die("fsync", path);
  close(fd);
  return written;
}

// One trial: seconds from creating the file(s) to every process's fsync; *writes: to the last
// process's last write before its fsync.
static double trial(const char* dir, int procs, enum layout l, enum method m, uint64_t total,
                    char** bufs, double* writes) {
  char path[4096];
  const uint64_t share = total / (uint64_t)procs;  // a multiple of ALIGN (total is whole MiB)
  int ready[2], go[2], result[2];
  if (pipe(ready) || pipe(go) || pipe(result)) die("pipe", "");
  pid_t pids[64];
  for (int r = 0; r < procs; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) die("fork", "");
    if (pids[r] == 0) {
      close(ready[0]), close(go[1]), close(result[0]);
      if (write(ready[1], "x", 1) != 1) _exit(2);
      char c;
      if (read(go[0], &c, 1) != 0) _exit(2);  // released when the parent closes go
      const double t0 = now();                // CLOCK_MONOTONIC: the same clock in every process
      if (l == SEPARATE)
        snprintf(path, sizeof path, "%s/rank%d.bin", dir, r);
      else
        snprintf(path, sizeof path, "%s/shared.bin", dir);
      const double w = child(path, l == SEPARATE, m, l == SEPARATE ? 0 : share * (uint64_t)r, share,
                             bufs[r], t0);
      if (write(result[1], &w, sizeof w) != sizeof w) _exit(2);
      _exit(0);
    }
  }
  close(ready[1]), close(go[0]), close(result[1]);
  for (int r = 0; r < procs; ++r) {
    char c;
    if (read(ready[0], &c, 1) != 1) die("read", "ready pipe");
  }
  const double t0 = now();
  if (l != SEPARATE) {
    snprintf(path, sizeof path, "%s/shared.bin", dir);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open", path);
    if (l == SHARED_SPARSE && ftruncate(fd, (off_t)total) != 0) die("ftruncate", path);
    if (l == SHARED_FALLOC && posix_fallocate(fd, 0, (off_t)total) != 0) die("fallocate", path);
    close(fd);
  }
  close(go[1]);
  int failed = 0;
  for (int r = 0; r < procs; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  const double t = now() - t0;
  *writes = 0;
  for (int r = 0; r < procs; ++r) {
    double w = 0;
    if (read(result[0], &w, sizeof w) == sizeof w && w > *writes) *writes = w;
  }
  close(ready[0]), close(result[0]);
  if (failed) {
    fprintf(stderr, "bench_file_io: a writer failed\n");
    exit(2);
  }
  for (int r = 0; r < procs; ++r) {
    snprintf(path, sizeof path, "%s/rank%d.bin", dir, r);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/shared.bin", dir);
  unlink(path);
  sync();
  return t;
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(const double* v, int n) {
  double s[64];
  memcpy(s, v, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), cmp);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [TOTAL_MIB] [REPS] [PROCS=1,2,4]\n", argv[0]);
    return 2;
  }
  const char* dir = argv[1];
  const uint64_t total = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1024) << 20;
  const int reps = argc > 3 ? atoi(argv[3]) : 5;
  int procs[8], nprocs = 0;
  for (char* s = strtok(argc > 4 ? argv[4] : strdup("1,2,4"), ","); s && nprocs < 8;
       s = strtok(NULL, ","))
    procs[nprocs++] = atoi(s);
  mkdir(dir, 0755);
  // Every process's source memory, allocated and touched before the timing (page-aligned for
  // O_DIRECT); the children inherit it.
  char* bufs[64];
  for (int r = 0; r < 64; ++r) {
    if (posix_memalign((void**)&bufs[r], ALIGN, CHUNK)) return 2;
    for (uint64_t i = 0; i < CHUNK; ++i) bufs[r][i] = (char)(i * 31 + (uint64_t)r);
  }
  enum { N = 3 * NLAYOUTS * NMETHODS };
  struct cfg {
    int procs;
    enum layout l;
    enum method m;
    double t[64], w[64];
  } cfgs[N];
  int n = 0;
  for (int p = 0; p < nprocs; ++p)
    for (int l = 0; l < NLAYOUTS; ++l)
      for (int m = 0; m < NMETHODS; ++m) {
        if (procs[p] == 1 && l == SHARED_FALLOC) continue;
        cfgs[n++] = (struct cfg){procs[p], (enum layout)l, (enum method)m, {0}, {0}};
      }
  for (int rep = 0; rep < reps; ++rep)
    for (int k = 0; k < n; ++k) {
      struct cfg* c = &cfgs[rep % 2 ? n - 1 - k : k];
      c->t[rep] = trial(dir, c->procs, c->l, c->m, total, bufs, &c->w[rep]);
    }
  printf(
      "| processes | file layout | method | median s | GiB/s | vs one file each, same method |"
      " writes before fsync, median s |\n");
  printf("|---|---|---|---|---|---|---|\n");
  for (int k = 0; k < n; ++k) {
    const struct cfg* c = &cfgs[k];
    const double med = median(c->t, reps);
    double sep = med;
    for (int j = 0; j < n; ++j)
      if (cfgs[j].procs == c->procs && cfgs[j].m == c->m && cfgs[j].l == SEPARATE)
        sep = median(cfgs[j].t, reps);
    printf("| %d | %s | %s | %.3f | %.2f | %.2fx | %.3f |\n", c->procs, layout_name[c->l],
           method_name[c->m], med, (double)total / (1 << 30) / med, sep / med, median(c->w, reps));
    fprintf(stderr, "{\"procs\": %d, \"layout\": \"%s\", \"method\": \"%s\", \"times\": [",
            c->procs, layout_name[c->l], method_name[c->m]);
    for (int r = 0; r < reps; ++r) fprintf(stderr, "%s%.4f", r ? ", " : "", c->t[r]);
    fprintf(stderr, "], \"writes\": [");
    for (int r = 0; r < reps; ++r) fprintf(stderr, "%s%.4f", r ? ", " : "", c->w[r]);
    fprintf(stderr, "]}\n");
  }
  return 0;
}
