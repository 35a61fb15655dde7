/* Every checkpoint error: a clear status on every rank, a message naming the problem, and the
 * model in memory untouched. Files are damaged here with plain HDF5 and POSIX calls. */
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt_model.h"

static char dir[512];

static void path_of(char* out, const char* name) {
  snprintf(out, 600, "%s/%s", dir, name);
}

/* A copy of every unit's shard and AdamW state, to prove a failed load changed nothing. */
static const char* state_names[2] = {"exp_avg", "exp_avg_sq"};
typedef struct {
  float* data[CM_NPARAMS][3]; /* the shard, then each state buffer */
  size_t n[CM_NPARAMS][3];
} snapshot_t;

static void* buffer_of(cm_model_t* m, int u, int b, size_t* n) {
  void* p = NULL;
  if (b == 0)
    CHECK_OK(fsdp_shard_data(m->units[u], &p, n));
  else
    CHECK_OK(fsdp_optimizer_state(m->opt, m->units[u], state_names[b - 1], &p, n));
  return p;
}

static void take(cm_model_t* m, snapshot_t* s) {
  for (int u = 0; u < m->nunits; ++u)
    for (int b = 0; b < 3; ++b) {
      const void* p = buffer_of(m, u, b, &s->n[u][b]);
      s->data[u][b] = malloc(s->n[u][b] * sizeof(float) + 1);
      memcpy(s->data[u][b], p, s->n[u][b] * sizeof(float));
    }
}

static void same_as(cm_model_t* m, snapshot_t* s, const char* after) {
  for (int u = 0; u < m->nunits; ++u)
    for (int b = 0; b < 3; ++b) {
      const void* p = buffer_of(m, u, b, NULL);
      char msg[200];
      snprintf(msg, sizeof msg, "unit %d %s changed after %s", u, b ? state_names[b - 1] : "shard",
               after);
      CHECK_MSG(memcmp(p, s->data[u][b], s->n[u][b] * sizeof(float)) == 0, msg);
      free(s->data[u][b]);
    }
}

static void copy_file(const char* from, const char* to) {
  if (th_rank() == 0) {
    FILE* in = fopen(from, "rb");
    FILE* out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 edits a copy with HDF5 itself. */
static void set_root_int(const char* file, const char* attr, long long v) {
  if (th_rank() == 0) {
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = H5Aopen(f, attr, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &v);
    H5Aclose(a);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static long long dataset_offset(const char* file, const char* ds) {
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
  const long long off = (long long)H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return off;
}

static void flip_byte(const char* file, long long offset) {
  if (th_rank() == 0) {
    FILE* f = fopen(file, "r+b");
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void load_fails(fsdp_context_t ctx, cm_model_t* m, const char* file, unsigned flags,
                       fsdp_status_t want, const char* needle) {
  snapshot_t s;
  take(m, &s);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m->opt, o.load_flags = flags;
  CHECK_FAILS(fsdp_checkpoint_load(ctx, file, &o, NULL), want, needle);
  same_as(m, &s, needle);
}

/* A byte flipped in a parameter, then in an optimizer state: FSDP_ERR_CORRUPT naming it. */
static void flipped_bytes_fail(fsdp_context_t ctx, cm_model_t* m, const char* good,
                               const char* other) {
  copy_file(good, other);
  flip_byte(other, dataset_offset(good, "/model/embed.weight") + 1000);
  load_fails(ctx, m, other, 0, FSDP_ERR_CORRUPT, "embed.weight");
  copy_file(good, other);
  flip_byte(other, dataset_offset(good, "/optimizers/0/exp_avg_sq/layer0.weight") + 3);
  load_fails(ctx, m, other, 0, FSDP_ERR_CORRUPT, "optimizer state of 'layer0.weight'");
}

/* A model like cm's with one parameter changed: renamed, reshaped or retyped. */
static void create_variant(fsdp_context_t ctx, const char* name, int64_t rows, fsdp_dtype_t t,
                           fsdp_unit_t* u) {
  static const int64_t shape[2] = {64, 33};
  int64_t s[2] = {rows, shape[1]};
  fsdp_param_desc_t d = {name, 2, s, t, 1};
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, u));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_checkpoint_errors");
  snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : ".");
  char good[600], other[600], text[600];
  path_of(good, "errors_good.h5");
  path_of(other, "errors_other.h5");
  path_of(text, "errors_text.h5");

  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "a", &m);
  cm_step(&m, 1);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, good, &o));
  cm_step(&m, 2); /* memory now differs from the file: a load would show */

  /* Arguments. */
  CHECK_FAILS(fsdp_checkpoint_save(ctx, NULL, &o), FSDP_ERR_INVALID_ARGUMENT, "path");
  CHECK_FAILS(fsdp_checkpoint_save(ctx, "", &o), FSDP_ERR_INVALID_ARGUMENT, "path");
  CHECK_FAILS(fsdp_checkpoint_save(NULL, good, &o), FSDP_ERR_INVALID_HANDLE, "ctx");
  const char* keys[] = {"step", "step"};
  const char* values[] = {"1", "2"};
  fsdp_checkpoint_options_t dup = o;
  dup.nmetadata = 2, dup.metadata_keys = keys, dup.metadata_values = values;
  CHECK_FAILS(fsdp_checkpoint_save(ctx, other, &dup), FSDP_ERR_INVALID_ARGUMENT, "given twice");
  dup.metadata_keys = NULL;
  CHECK_FAILS(fsdp_checkpoint_save(ctx, other, &dup), FSDP_ERR_INVALID_ARGUMENT, "metadata_keys");
  fsdp_checkpoint_options_t bad_flags = o;
  bad_flags.load_flags = 64;
  load_fails(ctx, &m, good, 64, FSDP_ERR_INVALID_ARGUMENT, "load_flags");
  fsdp_checkpoint_options_t bad_size = o;
  bad_size.size = 0;
  CHECK_FAILS(fsdp_checkpoint_load(ctx, good, &bad_size, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "options->size");
  fsdp_request_t req = NULL;
  CHECK_FAILS(fsdp_checkpoint_save_async(ctx, good, &o, NULL), FSDP_ERR_INVALID_ARGUMENT, "req");
  CHECK_FAILS(fsdp_test(req, NULL), FSDP_ERR_INVALID_HANDLE, "req");

  /* A save that cannot happen leaves the earlier file alone. */
  CHECK_FAILS(fsdp_checkpoint_save(ctx, "/nonexistent-dir/x.h5", &o), FSDP_ERR_IO,
              "nonexistent-dir");

  /* Files that are not checkpoints, or not this version's. */
  load_fails(ctx, &m, "/nonexistent-dir/x.h5", 0, FSDP_ERR_IO, "No such file");
  if (th_rank() == 0) {
    FILE* f = fopen(text, "w");
    fputs("not hdf5\n", f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  load_fails(ctx, &m, text, 0, FSDP_ERR_FORMAT, "not an HDF5 file");
  if (th_rank() == 0) {
    hid_t f = H5Fcreate(text, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  load_fails(ctx, &m, text, 0, FSDP_ERR_FORMAT, "not an fsdp checkpoint");
  copy_file(good, other);
  set_root_int(other, "format_version", 2);
  load_fails(ctx, &m, other, 0, FSDP_ERR_VERSION, "format version 2");

  /* Damaged data: one flipped byte, a truncated file. */
  flipped_bytes_fail(ctx, &m, good, other);
#ifdef FSDP_TEST_HOOKS
  /* The same read as from the disk (the hook: as if nothing were in the page cache), where each
   * rank's pieces are read straight into its shards and optimizer state before they are verified,
   * and must be put back when some rank's checksum fails. */
  setenv("FSDP_CKPT_TEST_COLD_LOAD", "1", 1);
  flipped_bytes_fail(ctx, &m, good, other);
  unsetenv("FSDP_CKPT_TEST_COLD_LOAD");
#endif
  /* A truncated file. */
  copy_file(good, other);
  if (th_rank() == 0) {
    FILE* f = fopen(other, "r+b");
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fclose(f);
    CHECK(truncate(other, size / 2) == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  load_fails(ctx, &m, other, 0, FSDP_ERR_CORRUPT, "truncated");

  /* Unsharded units cannot be loaded into. */
  CHECK_OK(fsdp_unshard(m.units[1]));
  load_fails(ctx, &m, good, 0, FSDP_ERR_STATE, "unsharded");
  CHECK_OK(fsdp_reshard(m.units[1]));

  /* The model does not match the file: each kind is listed. */
  fsdp_unit_t extra = NULL;
  create_variant(ctx, "head.weight", 64, FSDP_FLOAT32, &extra);
  load_fails(ctx, &m, good, FSDP_LOAD_MODEL_ONLY, FSDP_ERR_MISMATCH, "missing: head.weight");
  /* Partial: the rest loads, and the report names what did not. */
  {
    void* p = NULL;
    CHECK_OK(fsdp_shard_data(extra, &p, NULL));
    fsdp_checkpoint_options_t po = FSDP_CHECKPOINT_OPTIONS_INIT;
    po.noptimizers = 1, po.optimizers = &m.opt, po.load_flags = FSDP_LOAD_PARTIAL;
    fsdp_checkpoint_report_t rep = {sizeof rep};
    CHECK_OK(fsdp_checkpoint_load(ctx, good, &po, &rep));
    CHECK(rep.loaded == CM_NPARAMS && rep.missing == 1 && rep.unexpected == 0);
    CHECK(rep.details && strstr(rep.details, "missing: head.weight"));
    cm_check(&m, 1, "partial load");
  }
  CHECK_OK(fsdp_unit_destroy(&extra));
  cm_step(&m, 2);

  /* Renamed, reshaped, retyped: a second context without the embedding's real description. */
  {
    fsdp_context_t c2 = cm_context("full");
    fsdp_unit_t u = NULL;
    cm_model_t m2;
    create_variant(c2, "embed.weight", 63, FSDP_FLOAT32, &u);
    fsdp_checkpoint_options_t mo = FSDP_CHECKPOINT_OPTIONS_INIT;
    mo.load_flags = FSDP_LOAD_MODEL_ONLY;
    CHECK_FAILS(fsdp_checkpoint_load(c2, good, &mo, NULL), FSDP_ERR_MISMATCH,
                "embed.weight is [63, 33] in the model, [64, 33] in the file");
    CHECK_FAILS(fsdp_checkpoint_load(c2, good, &mo, NULL), FSDP_ERR_MISMATCH,
                "unexpected: layer0.bias");
    CHECK_OK(fsdp_unit_destroy(&u));
    create_variant(c2, "embed.weight", 64, FSDP_FLOAT64, &u);
    mo.load_flags = FSDP_LOAD_MODEL_ONLY | FSDP_LOAD_PARTIAL;
    fsdp_checkpoint_report_t rep = {sizeof rep};
    CHECK_OK(fsdp_checkpoint_load(c2, good, &mo, &rep));
    CHECK(rep.loaded == 0 && rep.mismatched == 1 && strstr(rep.details, "dtype: embed.weight"));
    /* Converted on request: float32 values widen exactly. */
    mo.load_flags |= FSDP_LOAD_CONVERT_DTYPE;
    CHECK_OK(fsdp_checkpoint_load(c2, good, &mo, &rep));
    CHECK(rep.loaded == 1);
    CHECK_OK(fsdp_unshard(u));
    double* got = NULL;
    CHECK_OK(fsdp_param_data(u, 0, (void**)&got));
    float* want = cm_reference(0, 1);
    size_t bad = 0;
    for (size_t e = 0; got && e < cm_numel(0); ++e) bad += got[e] != (double)want[e];
    CHECK_MSG(bad == 0, "float32 -> float64 conversion on load");
    free(want);
    CHECK_OK(fsdp_reshard(u));
    CHECK_OK(fsdp_unit_destroy(&u));
    (void)m2;
    CHECK_OK(fsdp_finalize(&c2));
  }

  /* Names must be unique across units to be saved. */
  fsdp_unit_t twin = NULL;
  create_variant(ctx, "layer0.weight", 2, FSDP_FLOAT32, &twin);
  CHECK_FAILS(fsdp_checkpoint_save(ctx, other, &o), FSDP_ERR_INVALID_ARGUMENT, "layer0.weight");
  CHECK_OK(fsdp_unit_destroy(&twin));

#ifdef FSDP_TEST_HOOKS
  /* A file truncated after it was verified (the test hook truncates it between the passes; the
   * values come through a memory mapping): FSDP_ERR_IO on every rank, never SIGBUS. The shards
   * may hold part of the file's values; the load below restores them. */
  copy_file(good, other);
  setenv("FSDP_CKPT_TEST_TRUNCATE_LOAD", "1", 1);
  {
    fsdp_checkpoint_options_t lo = FSDP_CHECKPOINT_OPTIONS_INIT;
    lo.noptimizers = 1, lo.optimizers = &m.opt;
    CHECK_FAILS(fsdp_checkpoint_load(ctx, other, &lo, NULL), FSDP_ERR_IO,
                "truncated or failed while it was being loaded");
  }
  unsetenv("FSDP_CKPT_TEST_TRUNCATE_LOAD");
#endif

  /* After all that, the good file still loads, from the page cache and as from the disk. */
  CHECK_OK(fsdp_checkpoint_load(ctx, good, &o, NULL));
  cm_check(&m, 1, "final load");
#ifdef FSDP_TEST_HOOKS
  cm_step(&m, 2);
  setenv("FSDP_CKPT_TEST_COLD_LOAD", "1", 1);
  CHECK_OK(fsdp_checkpoint_load(ctx, good, &o, NULL));
  unsetenv("FSDP_CKPT_TEST_COLD_LOAD");
  cm_check(&m, 1, "final load read as from the disk");
  cm_step(&m, 2); /* the optimizer state came back too: this step is the reference's second */
  cm_check(&m, 2, "a step after the load read as from the disk");
#endif
  char v[8];
  CHECK_FAILS(fsdp_checkpoint_metadata(good, "nope", v, sizeof v, NULL), FSDP_ERR_OUT_OF_RANGE,
              "nope");
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
