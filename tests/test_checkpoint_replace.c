/* A save over an existing checkpoint: the new file replaces the old one (the load sees the later
 * step's values, bit for bit against the non-sharded reference), the replaced file is unlinked
 * in the background shortly after (no <path>.prev-* is left), and a <path>.prev-* that a crash
 * left behind is removed by the next save.
 *   test_checkpoint_replace <scratch dir> */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_model.h"

/* Files in `dir` whose name starts with `prefix`. */
static int count_prefixed(const char* dir, const char* prefix) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_checkpoint_replace");
  if (argc < 2) return fprintf(stderr, "usage: test_checkpoint_replace <dir>\n"), 2;
  const char* transport = getenv("FSDP_TRANSPORT");
  char name[96], path[600], stale[700], prefix[120];
  snprintf(name, sizeof name, "replace-%s-np%d.h5", transport ? transport : "auto", th_size());
  snprintf(path, sizeof path, "%s/%s", argv[1], name);
  snprintf(prefix, sizeof prefix, "%s.prev-", name);
  snprintf(stale, sizeof stale, "%s.prev-1-7", path);

  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "a", &m);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;
  cm_step(&m, 1);
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));
  if (th_rank() == 0) { /* what a crash between link and unlink would leave */
    FILE* f = fopen(stale, "w");
    CHECK(f != NULL);
    if (f) fputs("stale", f), fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  cm_step(&m, 2);
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o)); /* replaces the step-1 file */
  if (th_rank() == 0) CHECK_MSG(access(stale, F_OK) != 0, "the stale .prev file is removed");
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));

  ctx = cm_context("full");
  cm_create(ctx, "b", &m);
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &o, NULL));
  cm_check(&m, 2, "the replacing save's values");
  cm_step(&m, 3);
  cm_check(&m, 3, "one step after the load (optimizer state of step 2)");
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));

  if (th_rank() == 0) { /* the background unlink of the step-1 file: well within 30 s */
    int left = -1;
    for (int i = 0; i < 300 && left != 0; ++i) {
      left = count_prefixed(argv[1], prefix);
      if (left) usleep(100000);
    }
    CHECK_MSG(left == 0, "the replaced checkpoint is unlinked in the background");
  }
  return th_finish();
}
