/* fsdp_checkpoint_verify and fsdp_checkpoint_diff (and their _fcomm twins) called from C: a
 * clean checkpoint verifies with every dataset counted (7 parameters and AdamW's 2 states of the
 * 6 trainable ones); one flipped byte is found and named; a checkpoint compared with itself is
 * identical, and with the same model one step later differs by exactly the largest change of each
 * parameter computed by the reference training (ckpt_model.h), the frozen one by nothing.
 * Bad input: a clear status naming the argument, the answer untouched; arguments that differ
 * between ranks: FSDP_ERR_MISMATCH.
 *   test_checkpoint_check <scratch dir> */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_model.h"

/* The report as rank 0 received it. */
typedef struct {
  char lines[64][256];
  int n;
  uint64_t done, total;
  int progress_calls;
} report_t;

static void collect(const char* line, void* user) {
  report_t* r = (report_t*)user;
  if (r->n < 64) snprintf(r->lines[r->n++], sizeof r->lines[0], "%s", line);
}

static void progress(uint64_t done, uint64_t total, void* user) {
  report_t* r = (report_t*)user;
  r->done = done, r->total = total, r->progress_calls++;
}

static const char* find_line(const report_t* r, const char* prefix) {
  for (int i = 0; i < r->n; ++i)
    if (strncmp(r->lines[i], prefix, strlen(prefix)) == 0) return r->lines[i];
  return NULL;
}

static fsdp_checkpoint_check_options_t options_for(report_t* r) {
  fsdp_checkpoint_check_options_t o = FSDP_CHECKPOINT_CHECK_OPTIONS_INIT;
  memset(r, 0, sizeof *r);
  o.report = collect, o.progress = progress, o.user = r;
  return o;
}

static void save(const char* path, int steps) {
  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "a", &m);
  for (int s = 1; s <= steps; ++s) cm_step(&m, s);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Rank 0 copies `from` to `to` and flips one bit of dataset `ds` (its offset from HDF5). */
static void corrupt_copy(const char* from, const char* to, const char* ds) {
  if (th_rank() == 0) {
    hid_t f = H5Fopen(from, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
    const long offset = (long)H5Dget_offset(d) + 5;
    H5Dclose(d);
    H5Fclose(f);
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
    FILE* g = fopen(to, "r+b");
    fseek(g, offset, SEEK_SET);
    const int c = fgetc(g);
    fseek(g, offset, SEEK_SET);
    fputc(c ^ 0x10, g);
    fclose(g);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The largest |step 1 - step 2| of parameter p by the reference training, as diff computes it
 * (float32 values converted to double). */
static double reference_max_change(int p) {
  float *a = cm_reference(p, 1), *b = cm_reference(p, 2);
  double m = 0;
  for (size_t e = 0; e < cm_numel(p); ++e) m = fmax(m, fabs((double)a[e] - (double)b[e]));
  free(a), free(b);
  return m;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_checkpoint_check");
  if (argc < 2) return fprintf(stderr, "usage: test_checkpoint_check <dir>\n"), 2;
  const char* transport = getenv("FSDP_TRANSPORT");
  char tag[64], one[512], two[512], bad[512], text[512], missing[512];
  snprintf(tag, sizeof tag, "%s-np%d", transport ? transport : "auto", th_size());
  snprintf(one, sizeof one, "%s/check-%s-1.h5", argv[1], tag);
  snprintf(two, sizeof two, "%s/check-%s-2.h5", argv[1], tag);
  snprintf(bad, sizeof bad, "%s/check-%s-corrupt.h5", argv[1], tag);
  snprintf(text, sizeof text, "%s/check-%s.txt", argv[1], tag);
  snprintf(missing, sizeof missing, "%s/check-%s-missing.h5", argv[1], tag);
  save(one, 1);
  save(two, 2);
  const int root = th_rank() == 0;
  report_t r;
  fsdp_checkpoint_check_options_t o = options_for(&r);

  /* A clean checkpoint: 7 + 2 * 6 datasets; progress ends at its total. */
  int failed = 7;
  CHECK_OK(fsdp_checkpoint_verify(MPI_COMM_WORLD, one, &o, &failed));
  CHECK_MSG(failed == 0, "a clean checkpoint verifies");
  if (root) {
    CHECK_MSG(r.n > 0 && strncmp(r.lines[r.n - 1], "OK: 19 datasets", 15) == 0,
              "the verdict counts every dataset");
    CHECK_MSG(r.progress_calls > 0 && r.done == r.total && r.total > 0,
              "progress reaches its total");
  } else {
    CHECK_MSG(r.n == 0 && r.progress_calls == 0, "callbacks run on rank 0 alone");
  }
  /* The same through the Fortran handle, with no report. */
  failed = 7;
  CHECK_OK(fsdp_checkpoint_verify_fcomm((int)MPI_Comm_c2f(MPI_COMM_WORLD), one, NULL, &failed));
  CHECK(failed == 0);

  /* One flipped bit in /model/layer0.weight: found and named, the others pass. */
  corrupt_copy(one, bad, "/model/layer0.weight");
  o = options_for(&r);
  CHECK_OK(fsdp_checkpoint_verify(MPI_COMM_WORLD, bad, &o, &failed));
  CHECK_MSG(failed == 1, "a flipped bit fails the verification on every rank");
  if (root) {
    CHECK(find_line(&r, "checksum mismatch: /model/layer0.weight") != NULL);
    CHECK(find_line(&r, "checksum mismatch: /model/embed.weight") == NULL);
    CHECK(find_line(&r, "FAILED: 1 of 19 datasets are corrupt") != NULL);
  }

  /* Identical, then one step apart by exactly the reference's changes. */
  int differ = 7;
  o = options_for(&r);
  CHECK_OK(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, one, &o, &differ));
  CHECK_MSG(differ == 0, "a checkpoint equals itself");
  if (root) CHECK(r.n > 0 && strncmp(r.lines[r.n - 1], "checkpoints are identical", 25) == 0);
  o = options_for(&r);
  CHECK_OK(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, two, &o, &differ));
  CHECK_MSG(differ == 1, "one step apart: they differ");
  for (int p = 0; root && p < CM_NPARAMS; ++p) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "/model/%s ", cm_names[p]);
    const char* line = find_line(&r, prefix);
    double abs_diff = -1, rel_diff = -1;
    CHECK_MSG(line && sscanf(line + strlen(prefix), "%lf %lf", &abs_diff, &rel_diff) == 2,
              cm_names[p]);
    const double want = reference_max_change(p);
    CHECK_MSG(fabs(abs_diff - want) <= 1e-5 * want, cm_names[p]); /* %g: 6 digits */
    if (!cm_trainable[p]) CHECK_MSG(abs_diff == 0 && rel_diff == 0, "the frozen one is equal");
  }
  if (root) CHECK(find_line(&r, "/optimizers/0/exp_avg/embed.weight ") != NULL);
  /* Parameters alone: no optimizer state compared, the verdict says so. */
  o = options_for(&r);
  o.model_only = 1;
  CHECK_OK(fsdp_checkpoint_diff_fcomm((int)MPI_Comm_c2f(MPI_COMM_WORLD), one, two, &o, &differ));
  CHECK(differ == 1);
  if (root) {
    CHECK(find_line(&r, "/optimizers/") == NULL);
    CHECK(find_line(&r, "checkpoints differ in their parameters (--model-only") != NULL);
  }

  /* Bad input: refused, the answer untouched. */
  if (root) {
    FILE* f = fopen(text, "w");
    fputs("not a checkpoint\n", f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  failed = differ = 7;
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, NULL, NULL, &failed),
              FSDP_ERR_INVALID_ARGUMENT, "fsdp_checkpoint_verify: path: NULL");
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, "", NULL, &failed), FSDP_ERR_INVALID_ARGUMENT,
              "path: empty");
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, one, NULL, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "failed: NULL");
  CHECK_FAILS(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, NULL, NULL, &differ),
              FSDP_ERR_INVALID_ARGUMENT, "fsdp_checkpoint_diff: b: NULL");
  CHECK_FAILS(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, two, NULL, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "differ: NULL");
  fsdp_checkpoint_check_options_t wrong = FSDP_CHECKPOINT_CHECK_OPTIONS_INIT;
  wrong.model_only = 2;
  CHECK_FAILS(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, two, &wrong, &differ),
              FSDP_ERR_INVALID_ARGUMENT, "options->model_only = 2");
  wrong.model_only = 0, wrong.size = 0;
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, one, &wrong, &failed),
              FSDP_ERR_INVALID_ARGUMENT, "options->size = 0");
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_NULL, one, NULL, &failed), FSDP_ERR_INVALID_ARGUMENT,
              "MPI_COMM_NULL");
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, missing, NULL, &failed), FSDP_ERR_IO,
              "missing.h5");
  CHECK_FAILS(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, missing, NULL, &differ), FSDP_ERR_IO,
              "missing.h5");
  CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, text, NULL, &failed), FSDP_ERR_FORMAT,
              "fsdp_checkpoint_verify");
  if (th_size() > 1) { /* one rank names another file: refused on every rank */
    CHECK_FAILS(fsdp_checkpoint_verify(MPI_COMM_WORLD, th_rank() == 1 ? two : one, NULL, &failed),
                FSDP_ERR_MISMATCH, "checkpoint check arguments");
    wrong = (fsdp_checkpoint_check_options_t)FSDP_CHECKPOINT_CHECK_OPTIONS_INIT;
    wrong.model_only = th_rank() == 1;
    CHECK_FAILS(fsdp_checkpoint_diff(MPI_COMM_WORLD, one, two, &wrong, &differ), FSDP_ERR_MISMATCH,
                "checkpoint check arguments");
  }
  CHECK_MSG(failed == 7 && differ == 7, "refused calls leave the answer untouched");
  return th_finish();
}
