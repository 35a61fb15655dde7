/* A disk that fills up during a save (enospc_shim.so, preloaded): every budget, from nothing left
 * to a disk that fills in the middle of the data, gives FSDP_ERR_IO naming the lack of space on
 * every rank, leaves the model in memory untouched, removes the partial file, and leaves the
 * previous checkpoint at the same path intact: it loads and equals the non-sharded reference of
 * the step it was saved at. Once there is space again, saving works. Asynchronous saves alike. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_model.h"

static void (*arm)(const char* dir, long long bytes, int fake_space);
static long long (*written)(void);

static void shard_copy(cm_model_t* m, float** copy, size_t* n) {
  for (int u = 0; u < m->nunits; ++u) {
    void* p = NULL;
    CHECK_OK(fsdp_shard_data(m->units[u], &p, &n[u]));
    copy[u] = malloc(n[u] * sizeof(float) + 1);
    if (p) memcpy(copy[u], p, n[u] * sizeof(float));
  }
}

static void same_shards(cm_model_t* m, float** copy, const char* after) {
  for (int u = 0; u < m->nunits; ++u) {
    void* p = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_shard_data(m->units[u], &p, &n));
    char msg[200];
    snprintf(msg, sizeof msg, "unit %d changed after %s", u, after);
    CHECK_MSG(p && memcmp(p, copy[u], n * sizeof(float)) == 0, msg);
  }
}

static long long file_size(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_checkpoint_full_disk");
  arm = (void (*)(const char*, long long, int))dlsym(RTLD_DEFAULT, "enospc_arm");
  written = (long long (*)(void))dlsym(RTLD_DEFAULT, "enospc_written");
  CHECK_MSG(arm != NULL, "enospc_shim is not preloaded (LD_PRELOAD): nothing would be tested");
  if (!arm) return th_finish();
  const char* dir = argc > 1 ? argv[1] : ".";
  char path[600], tmp[640];
  snprintf(path, sizeof path, "%s/full_disk.h5", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "a", &m);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;

  /* The previous checkpoint: step 1. Counting what each rank writes for it. */
  cm_step(&m, 1);
  arm(dir, 1LL << 60, 0);
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));
  const long long my_bytes = written();
  arm(dir, -1, 0);
  const long long good_size = file_size(path);
  CHECK(good_size > 0 && my_bytes > 0);
  cm_step(&m, 2);
  float* copy[CM_NPARAMS];
  size_t n[CM_NPARAMS];
  shard_copy(&m, copy, n);

  /* Too little free space, as statvfs says: no space, a little, half and nearly all of the file.
   * Then a disk that fills during the data, though statvfs promised room (another job writing):
   * each rank's last write fails. */
  const long long budgets[] = {0, 2048, good_size / 2, good_size - 64, -1};
  for (int b = 0; b < 5; ++b) {
    for (int async = 0; async < 2; ++async) {
      const int during_data = budgets[b] < 0;
      const long long budget = during_data ? (my_bytes > 0 ? my_bytes - 1 : 0) : budgets[b];
      char when[160];
      snprintf(when, sizeof when, "a%s save %s %lld bytes", async ? " background" : "",
               during_data ? "running out of space after" : "with free space", budget);
      arm(dir, budget, !during_data);
      if (async) {
        fsdp_request_t req = NULL;
        CHECK_OK(fsdp_checkpoint_save_async(ctx, path, &o, &req));
        CHECK_FAILS(fsdp_wait(&req), FSDP_ERR_IO, "space");
      } else {
        CHECK_FAILS(fsdp_checkpoint_save(ctx, path, &o), FSDP_ERR_IO, "space");
      }
      /* Found before writing (the free space check) or by the write itself. */
      const int preflight = strstr(fsdp_last_error(), "needs about") != NULL;
      CHECK_MSG(preflight == !during_data, fsdp_last_error());
      arm(dir, -1, 0);
      MPI_Barrier(MPI_COMM_WORLD);
      same_shards(&m, copy, when);
      CHECK_MSG(access(tmp, F_OK) != 0, "the partial file was left behind");
      CHECK_MSG(file_size(path) == good_size, "the previous checkpoint changed size");
    }
  }
  for (int u = 0; u < m.nunits; ++u) free(copy[u]);
  cm_check(&m, 2, "after the failed saves");

  /* The previous checkpoint is intact: it loads, and holds step 1. */
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &o, NULL));
  cm_check(&m, 1, "the previous checkpoint, loaded after the full disk");
  /* Space again: saving works, and the new file holds step 2. */
  cm_step(&m, 2);
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));
  cm_step(&m, 3);
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &o, NULL));
  cm_check(&m, 2, "saved once the disk had space again");

  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
