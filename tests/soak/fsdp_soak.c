/* Soak: many unshard/reshard/reduce cycles over many units, with asynchronous variants, optimizer
 * steps and checkpoint saves with rotation (synchronous and in the background), then checks that
 * nothing grew: resident memory (VmRSS), the library's own memory counters, live MPI objects
 * (communicators, windows, datatypes, infos, groups, files, requests) and open file descriptors,
 * between the first sample after warm-up and the last. Values are checked too: the learning rate
 * is 0, so parameters must keep their initial values through every cycle, save and load, and each
 * reduced gradient must equal the mean every rank wrote (computed here, independently).
 *
 * Usage: fsdp_soak <dir> <cycles> <saves> [--curve FILE]
 *   cycles: unit cycles in total (each: unshard, write gradients, reshard, reduce);
 *   saves: checkpoints written to <dir>/soak-<n>.h5, keeping the last 3. */
#include <dirent.h>
#include <hdf5.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mpi_objects.h"

#define NUNITS 12
#define KEEP 3

static long rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

static int open_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  while (d && readdir(d)) ++n;
  if (d) closedir(d);
  return n - 3; /* ".", "..", and the directory's own descriptor */
}

/* Bytes malloc has handed out and not had back: live heap, whatever the fragmentation. */
static long heap_kib(void) {
  return (long)(mallinfo2().uordblks / 1024);
}

typedef struct {
  long saves; /* checkpoints saved when sampled */
  long rss_kib, heap_kib;
  int fds;
  long objects[MPI_OBJECT_KINDS];
  fsdp_memory_stats_t mem;
} sample_t;

/* Everything fsdp_memory_stats counts as held now (not the peaks). */
static size_t library_bytes(const fsdp_memory_stats_t* m) {
  return m->shard_bytes + m->grad_shard_bytes + m->unsharded_bytes + m->pool_cached_bytes +
         m->scratch_bytes + m->full_grad_bytes + m->optimizer_state_bytes;
}

static void take_sample(fsdp_context_t ctx, sample_t* s) {
  /* HDF5 keeps freed objects on free lists of its own, bounded but filled over many files:
   * memory it holds, not lost. Emptied before measuring (no save is in flight now). */
  H5garbage_collect();
  s->rss_kib = rss_kib();
  s->heap_kib = heap_kib();
  s->fds = open_fds();
  for (int k = 0; k < MPI_OBJECT_KINDS; ++k) s->objects[k] = mpi_objects_live(k);
  s->mem.size = sizeof s->mem;
  CHECK_OK(fsdp_memory_stats(ctx, &s->mem));
}

/* Unit u: 2 parameters, sizes from 1 Ki to 64 Ki elements (some not divisible by the ranks). */
static int64_t unit_numel(int u, int p) {
  return (int64_t)(1024 << (u % 7)) + 3 * u + p;
}
static float init_value(int u, int p, int64_t e) {
  return (float)((u * 31 + p * 7 + e) % 97) / 32.0f;
}
static float grad_value(int u, int p, int64_t e, int rank, long cycle) {
  return (float)((u + p + e + rank + cycle) % 13) / 8.0f; /* sums of these are exact */
}

static void check_params(fsdp_unit_t unit, int u, const char* when) {
  for (int p = 0; p < 2; ++p) {
    float* w = NULL;
    CHECK_OK(fsdp_param_data(unit, p, (void**)&w));
    long bad = 0;
    for (int64_t e = 0; w && e < unit_numel(u, p); ++e) bad += w[e] != init_value(u, p, e);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: unit %d param %d: %ld values changed", when, u, p, bad);
    CHECK_MSG(bad == 0, msg);
  }
}

static void checkpoint_path(char* out, const char* dir, long n) {
  snprintf(out, 600, "%s/soak-%ld.h5", dir, n);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "fsdp_soak");
  if (argc < 4) {
    if (th_rank() == 0) fprintf(stderr, "usage: fsdp_soak <dir> <cycles> <saves> [--curve FILE]\n");
    MPI_Finalize();
    return 2;
  }
  const char* dir = argv[1];
  const long cycles = atol(argv[2]), saves = atol(argv[3]);
  const char* curve_path = argc > 5 && strcmp(argv[4], "--curve") == 0 ? argv[5] : NULL;
  const int rank = th_rank(), size = th_size();

  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  fsdp_unit_t units[NUNITS];
  char names[NUNITS][2][32];
  for (int u = 0; u < NUNITS; ++u) {
    fsdp_param_desc_t d[2];
    int64_t shape[2][1];
    float* init[2];
    for (int p = 0; p < 2; ++p) {
      snprintf(names[u][p], sizeof names[u][p], "u%d.p%d", u, p);
      shape[p][0] = unit_numel(u, p);
      d[p] = (fsdp_param_desc_t){names[u][p], 1, shape[p], FSDP_FLOAT32, 1};
      init[p] = malloc((size_t)shape[p][0] * sizeof(float));
      for (int64_t e = 0; e < shape[p][0]; ++e) init[p][e] = init_value(u, p, e);
    }
    CHECK_OK(fsdp_unit_create(ctx, 2, d, (const void* const*)init, &units[u]));
    free(init[0]), free(init[1]);
  }
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  hp.lr = 0.0; /* the values must not move: every save and load is then checkable */
  hp.weight_decay = 0.0;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &hp, NUNITS, units, &opt));
  fsdp_checkpoint_options_t co = FSDP_CHECKPOINT_OPTIONS_INIT;
  co.noptimizers = 1, co.optimizers = &opt;

  /* A forward pass reading every parameter first, as training starts: every page of every
   * unsharded copy is then mapped (with zero-copy storage each unit has its own, which the
   * sparse checks below would otherwise map bit by bit, looking like growth). */
  for (int u = 0; u < NUNITS; ++u) {
    CHECK_OK(fsdp_unshard(units[u]));
    check_params(units[u], u, "before the soak");
    CHECK_OK(fsdp_reshard(units[u]));
  }

  const long steps = (cycles + NUNITS - 1) / NUNITS;
  const int nsamples = 20;
  sample_t first, last;
  FILE* curve = rank == 0 && curve_path ? fopen(curve_path, "w") : NULL;
  if (curve) fprintf(curve, "cycle,rss_kib,heap_kib,fds,live_mpi_objects,library_bytes\n");
  long done = 0, saved = 0;
  fsdp_request_t save_req = NULL;
  for (long step = 0; step < steps; ++step) {
    for (int u = 0; u < NUNITS && done < cycles; ++u, ++done) {
      fsdp_unit_t unit = units[u];
      if (done % 3 == 1) { /* the asynchronous forms */
        fsdp_request_t r = NULL;
        CHECK_OK(fsdp_unshard_async(unit, &r));
        CHECK_OK(fsdp_wait(&r));
      } else {
        CHECK_OK(fsdp_unshard(unit));
      }
      if (done % 997 == 0) check_params(unit, u, "during the soak");
      for (int p = 0; p < 2; ++p) {
        float* g = NULL;
        CHECK_OK(fsdp_grad_data(unit, p, (void**)&g));
        for (int64_t e = 0; g && e < unit_numel(u, p); ++e) g[e] = grad_value(u, p, e, rank, done);
      }
      CHECK_OK(fsdp_reshard(unit));
      if (done % 3 == 2) {
        fsdp_request_t r = NULL;
        CHECK_OK(fsdp_reduce_grads_async(unit, &r));
        CHECK_OK(fsdp_wait(&r));
      } else {
        CHECK_OK(fsdp_reduce_grads(unit));
      }
      if (done % 1999 == 0) { /* the reduced gradient shard is the mean of the ranks' */
        float* gs = NULL;
        CHECK_OK(fsdp_shard_grad(unit, (void**)&gs, NULL));
        long bad = 0;
        for (int p = 0; p < 2 && gs; ++p) {
          size_t at = 0, e0 = 0, len = 0;
          CHECK_OK(fsdp_param_shard_range(unit, p, &at, &e0, &len));
          for (size_t i = 0; i < len; ++i) {
            double sum = 0;
            for (int r = 0; r < size; ++r) sum += grad_value(u, p, (int64_t)(e0 + i), r, done);
            bad += gs[at + i] != (float)(sum / size);
          }
        }
        CHECK_MSG(bad == 0, "a reduced gradient is not the mean of the ranks' gradients");
      }
    }
    CHECK_OK(fsdp_optimizer_step(opt));
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
    if (saved < saves && (step + 1) * saves / steps > saved) { /* spread evenly */
      char path[600], old[600];
      checkpoint_path(path, dir, saved);
      if (saved % 2) {
        CHECK_OK(fsdp_checkpoint_save_async(ctx, path, &co, &save_req));
        CHECK_OK(fsdp_wait(&save_req));
      } else {
        CHECK_OK(fsdp_checkpoint_save(ctx, path, &co));
      }
      if (rank == 0 && saved >= KEEP) { /* rotation */
        checkpoint_path(old, dir, saved - KEEP);
        CHECK_MSG(unlink(old) == 0, old);
      }
      ++saved;
    }
    /* Samples: the first after a tenth of the run (warm-up: pools and lazy buffers filled). */
    const long sample_every = steps / nsamples > 0 ? steps / nsamples : 1;
    if (step % sample_every == sample_every - 1 || step == steps - 1) {
      sample_t s;
      take_sample(ctx, &s);
      s.saves = saved;
      if (step < 2 * sample_every) first = s;
      last = s;
      long objects = 0;
      for (int k = 0; k < MPI_OBJECT_KINDS; ++k) objects += s.objects[k];
      if (curve)
        fprintf(curve, "%ld,%ld,%ld,%d,%ld,%zu\n", done, s.rss_kib, s.heap_kib, s.fds, objects,
                library_bytes(&s.mem));
    }
  }
  if (curve) fclose(curve);

  /* Nothing grew. The one growth allowed: MPICH 4.0.2's ROMIO keeps 192 bytes, never freed,
   * per MPI_File_set_view with a derived file type and per collective write from a derived
   * memory type, on some ranks (reproduced with a plain MPI program, doc/testing.md); a save
   * makes one of each per 64 MiB round, and 1 KiB per save is allowed for them. Unit cycles are
   * allowed nothing. The heap in use (mallinfo2) is the measure, exact; RSS adds allocator
   * noise: 1 MiB or 1% more. */
  const long saves_between = last.saves - first.saves;
  const long heap_growth = last.heap_kib - first.heap_kib;
  const long heap_allowed = 64 + saves_between;
  const long rss_growth = last.rss_kib - first.rss_kib;
  const long rss_allowed = heap_allowed + (first.rss_kib / 100 > 1024 ? first.rss_kib / 100 : 1024);
  char msg[256];
  snprintf(msg, sizeof msg,
           "heap in use grew %ld KiB (from %ld to %ld KiB; %ld allowed for %ld saves)", heap_growth,
           first.heap_kib, last.heap_kib, heap_allowed, saves_between);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  /* A sanitizer's allocator keeps freed memory in quarantine: memory grows by design there, and
   * LeakSanitizer checks for leaks at exit instead. */
  (void)heap_allowed, (void)rss_allowed, (void)rss_growth;
  if (rank == 0) printf("soak: %s (not checked under a sanitizer)\n", msg);
#else
  CHECK_MSG(heap_growth <= heap_allowed, msg);
  snprintf(msg, sizeof msg, "VmRSS grew %ld KiB (from %ld to %ld KiB; %ld allowed)", rss_growth,
           first.rss_kib, last.rss_kib, rss_allowed);
  CHECK_MSG(rss_growth <= rss_allowed, msg);
#endif
  snprintf(msg, sizeof msg, "open descriptors %d -> %d", first.fds, last.fds);
  CHECK_MSG(last.fds == first.fds, msg);
  for (int k = 0; k < MPI_OBJECT_KINDS; ++k) {
    snprintf(msg, sizeof msg, "live MPI %s %ld -> %ld", mpi_object_names[k], first.objects[k],
             last.objects[k]);
    CHECK_MSG(last.objects[k] == first.objects[k], msg);
  }
#define SAME(field)                                                                            \
  snprintf(msg, sizeof msg, "library " #field " %zu -> %zu", first.mem.field, last.mem.field); \
  CHECK_MSG(last.mem.field == first.mem.field, msg)
  SAME(shard_bytes);
  SAME(grad_shard_bytes);
  SAME(unsharded_bytes);
  SAME(pool_cached_bytes);
  SAME(scratch_bytes);
  SAME(full_grad_bytes);
  SAME(optimizer_state_bytes);
  SAME(peak_bytes);

  /* The last checkpoint loads, and holds the initial values. */
  if (saved > 0) {
    char path[600];
    checkpoint_path(path, dir, saved - 1);
    CHECK_OK(fsdp_checkpoint_load(ctx, path, &co, NULL));
  }
  for (int u = 0; u < NUNITS; ++u) {
    CHECK_OK(fsdp_unshard(units[u]));
    check_params(units[u], u, "after the soak and the last checkpoint's load");
    CHECK_OK(fsdp_reshard(units[u]));
  }
  /* Every rank's memory, in rank order. */
  long mine[4] = {first.rss_kib, last.rss_kib, first.heap_kib, last.heap_kib};
  long* all = rank == 0 ? malloc(sizeof mine * (size_t)size) : NULL;
  MPI_Gather(mine, 4, MPI_LONG, all, 4, MPI_LONG, 0, MPI_COMM_WORLD);
  for (int r = 0; rank == 0 && r < size; ++r)
    printf("soak: rank %d: VmRSS %ld -> %ld KiB, heap in use %ld -> %ld KiB\n", r, all[4 * r],
           all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]);
  free(all);
  if (rank == 0) {
    printf("soak: %d ranks, %ld unit cycles, %ld checkpoint saves (last %d kept)\n", size, done,
           saved, KEEP);
    printf("soak: rank 0 VmRSS %ld KiB after warm-up -> %ld KiB at the end; fds %d -> %d\n",
           first.rss_kib, last.rss_kib, first.fds, last.fds);
    printf("soak: live MPI objects");
    for (int k = 0; k < MPI_OBJECT_KINDS; ++k)
      printf(" %s %ld->%ld", mpi_object_names[k], first.objects[k], last.objects[k]);
    printf("\nsoak: library bytes %zu -> %zu\n", library_bytes(&first.mem),
           library_bytes(&last.mem));
  }
  for (long n = saved - KEEP; rank == 0 && n < saved; ++n) {
    char path[600];
    checkpoint_path(path, dir, n < 0 ? 0 : n);
    unlink(path);
  }
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  for (int u = 0; u < NUNITS; ++u) CHECK_OK(fsdp_unit_destroy(&units[u]));
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
