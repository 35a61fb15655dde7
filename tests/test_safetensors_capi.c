/* fsdp_safetensors_export and fsdp_safetensors_import called from C, as an FFI user calls them:
 * a checkpoint trained 2 steps is exported to Hugging Face's sharded layout (float32, and
 * bfloat16), imported back into a new checkpoint, and loaded (model only) into another unit
 * grouping: every parameter equals the non-sharded reference at step 2 bit for bit (float32), or
 * its bfloat16 rounding. Bad input: a clear status naming the argument, on every rank alike, and
 * nothing written; arguments that differ between ranks: FSDP_ERR_MISMATCH.
 *   test_safetensors_capi <scratch dir> */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_model.h"

static char ckpt[512], dir[512], imported[512];

static void load_and_check(const char* file, int exact) {
  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "b", &m);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.load_flags = FSDP_LOAD_MODEL_ONLY;
  fsdp_checkpoint_report_t rep = {sizeof rep};
  CHECK_OK(fsdp_checkpoint_load(ctx, file, &o, &rep));
  CHECK(rep.loaded == CM_NPARAMS && rep.missing == 0);
  if (exact) {
    cm_check(&m, 2, "imported from safetensors");
  } else { /* bfloat16 keeps 8 bits of mantissa: within 2^-8 relative of the reference */
    int bad = 0;
    for (int u = 0; u < m.nunits; ++u) {
      CHECK_OK(fsdp_unshard(m.units[u]));
      for (int i = 0; m.params[u][i] >= 0; ++i) {
        const int p = m.params[u][i];
        float* got = NULL;
        CHECK_OK(fsdp_param_data(m.units[u], i, (void**)&got));
        float* want = cm_reference(p, 2);
        for (size_t e = 0; got && e < cm_numel(p); ++e) {
          const float d = got[e] - want[e], tol = (want[e] < 0 ? -want[e] : want[e]) / 256.0f;
          bad += d > tol || -d > tol;
        }
        free(want);
      }
      CHECK_OK(fsdp_reshard(m.units[u]));
    }
    CHECK_MSG(bad == 0, "a bfloat16 export imported back is within bfloat16 rounding");
  }
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_safetensors_capi");
  if (argc < 2) return fprintf(stderr, "usage: test_safetensors_capi <dir>\n"), 2;
  /* Names of this run's own (CTest runs the transport variants side by side). */
  const char* transport = getenv("FSDP_TRANSPORT");
  char tag[64];
  snprintf(tag, sizeof tag, "%s-np%d", transport ? transport : "auto", th_size());
  snprintf(ckpt, sizeof ckpt, "%s/capi-%s.h5", argv[1], tag);
  snprintf(dir, sizeof dir, "%s/capi-%s-hf", argv[1], tag);
  snprintf(imported, sizeof imported, "%s/capi-%s-imported.h5", argv[1], tag);

  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "a", &m);
  cm_step(&m, 1);
  cm_step(&m, 2);
  CHECK_OK(fsdp_checkpoint_save(ctx, ckpt, NULL));
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));

  fsdp_safetensors_options_t o = FSDP_SAFETENSORS_OPTIONS_INIT;
  o.max_shard_bytes = 4096;
  CHECK_OK(fsdp_safetensors_export(MPI_COMM_WORLD, ckpt, dir, &o));
  char index[600];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
  CHECK_MSG(access(index, R_OK) == 0, "the sharded export has its index");
  CHECK_OK(fsdp_safetensors_import(MPI_COMM_WORLD, dir, imported, NULL));
  load_and_check(imported, 1);

  o.dtype = FSDP_BFLOAT16;
  CHECK_OK(fsdp_safetensors_export(MPI_COMM_WORLD, ckpt, dir, &o));
  CHECK_OK(fsdp_safetensors_import(MPI_COMM_WORLD, index, imported, NULL));
  load_and_check(imported, 0);

  /* Bad input: the status, the call and the argument named, nothing written. */
  struct stat before, after;
  CHECK(stat(imported, &before) == 0);
  CHECK_FAILS(fsdp_safetensors_export(MPI_COMM_WORLD, NULL, dir, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "checkpoint: NULL");
  CHECK_FAILS(fsdp_safetensors_import(MPI_COMM_WORLD, dir, "", NULL), FSDP_ERR_INVALID_ARGUMENT,
              "checkpoint: empty");
  fsdp_safetensors_options_t bad = FSDP_SAFETENSORS_OPTIONS_INIT;
  bad.dtype = FSDP_BFLOAT16;
  CHECK_FAILS(fsdp_safetensors_import(MPI_COMM_WORLD, dir, imported, &bad),
              FSDP_ERR_INVALID_ARGUMENT, "options->dtype");
  bad.dtype = (fsdp_dtype_t)42;
  CHECK_FAILS(fsdp_safetensors_export(MPI_COMM_WORLD, ckpt, dir, &bad), FSDP_ERR_INVALID_ARGUMENT,
              "options->dtype = 42");
  bad = (fsdp_safetensors_options_t)FSDP_SAFETENSORS_OPTIONS_INIT;
  bad.max_shard_bytes = 1;
  CHECK_FAILS(fsdp_safetensors_import(MPI_COMM_WORLD, dir, imported, &bad),
              FSDP_ERR_INVALID_ARGUMENT, "max_shard_bytes");
  bad.size = 0;
  CHECK_FAILS(fsdp_safetensors_export(MPI_COMM_WORLD, ckpt, dir, &bad), FSDP_ERR_INVALID_ARGUMENT,
              "options->size = 0");
  CHECK_FAILS(fsdp_safetensors_export(MPI_COMM_NULL, ckpt, dir, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "MPI_COMM_NULL");
  char missing[600];
  snprintf(missing, sizeof missing, "%s/no-such-dir", argv[1]);
  CHECK_FAILS(fsdp_safetensors_import(MPI_COMM_WORLD, missing, imported, NULL), FSDP_ERR_IO,
              "no-such-dir");
  if (th_size() > 1) { /* one rank names another file: refused on every rank, nothing runs */
    CHECK_FAILS(
        fsdp_safetensors_import(MPI_COMM_WORLD, th_rank() == 1 ? index : dir, imported, NULL),
        FSDP_ERR_MISMATCH, "safetensors arguments");
  }
  CHECK(stat(imported, &after) == 0);
  CHECK_MSG(before.st_mtime == after.st_mtime && before.st_size == after.st_size &&
                before.st_ino == after.st_ino,
            "the checkpoint at the target is untouched by the refused calls");
  return th_finish();
}
