/* fsdp_unshard returns every original parameter bit for bit, and each rank's shard is exactly its
 * slice of the padded concatenation. The reference (flat layout, slices) is computed here,
 * independently of the library. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MAX_PARAMS 320

typedef struct {
  const char* label;
  int nparams;
  int ndim[MAX_PARAMS];
  int64_t shape[MAX_PARAMS][3];
} layout_case_t;

static size_t numel_of(const layout_case_t* c, int i) {
  size_t n = 1;
  for (int d = 0; d < c->ndim[i]; ++d) n *= (size_t)c->shape[i][d];
  return n;
}

static void set_param(layout_case_t* c, int i, int ndim, int64_t a, int64_t b, int64_t d) {
  c->ndim[i] = ndim;
  c->shape[i][0] = a;
  c->shape[i][1] = b;
  c->shape[i][2] = d;
}

/* Values are random but the same on every rank; element e of parameter i is value(seed, i, e). */
static double value(int i, size_t e) {
  uint64_t s = ((uint64_t)i << 32) ^ (uint64_t)e ^ 0x5eedull;
  return th_uniform(&s) * 1000.0;
}

static void store(void* base, size_t k, fsdp_dtype_t t, double v) {
  if (t == FSDP_FLOAT32)
    ((float*)base)[k] = (float)v;
  else
    ((double*)base)[k] = v;
}

static void run_case(fsdp_context_t ctx, const layout_case_t* c, fsdp_dtype_t dtype,
                     int null_entries) {
  const size_t esize = dtype == FSDP_FLOAT32 ? 4 : 8;
  int F = 0, srank = 0;
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));

  fsdp_param_desc_t descs[MAX_PARAMS];
  char names[MAX_PARAMS][32];
  void* values[MAX_PARAMS];
  /* Each parameter at a multiple of 8 elements, each shard a multiple of 8 elements (fsdp.h). */
  size_t offsets[MAX_PARAMS], total = 0, end = 0;
  for (int i = 0; i < c->nparams; ++i) {
    snprintf(names[i], sizeof names[i], "layer%d.p", i);
    descs[i].name = names[i];
    descs[i].ndim = c->ndim[i];
    descs[i].shape = c->shape[i];
    descs[i].dtype = dtype;
    descs[i].requires_grad = 1;
    const size_t n = numel_of(c, i);
    offsets[i] = (end + 7) / 8 * 8;
    end = offsets[i] + n;
    total += n;
    values[i] = malloc(n * esize);
    for (size_t e = 0; e < n; ++e)
      store(values[i], e, dtype, (null_entries && i % 3 == 1) ? 0.0 : value(i, e));
  }
  const void* init[MAX_PARAMS];
  for (int i = 0; i < c->nparams; ++i) init[i] = (null_entries && i % 3 == 1) ? NULL : values[i];

  /* Independent reference: the padded flat parameter and this rank's slice of it. */
  const size_t shard_n = ((end + (size_t)F - 1) / (size_t)F + 7) / 8 * 8,
               padded = shard_n * (size_t)F;
  char* flat = calloc(padded, esize);
  for (int i = 0; i < c->nparams; ++i)
    memcpy(flat + offsets[i] * esize, values[i], numel_of(c, i) * esize);

  fsdp_unit_t unit = NULL;
  CHECK_OK(fsdp_unit_create(ctx, c->nparams, descs, init, &unit));
  size_t got_total = 0, got_padded = 0, got_shard = 0;
  CHECK_OK(fsdp_unit_numel(unit, &got_total, &got_padded, &got_shard));
  CHECK(got_total == total && got_padded == padded && got_shard == shard_n);

  void* shard = NULL;
  size_t shard_len = 0;
  CHECK_OK(fsdp_shard_data(unit, &shard, &shard_len));
  CHECK(shard_len == shard_n);
  CHECK_MSG(((uintptr_t)shard & 15u) == 0, "fsdp_shard_data: a 16-byte aligned pointer");
  CHECK_MSG(memcmp(shard, flat + (size_t)srank * shard_n * esize, shard_n * esize) == 0, c->label);

  for (int i = 0; i < c->nparams; ++i) {
    const size_t begin = (size_t)srank * shard_n, end = begin + shard_n;
    const size_t pb = offsets[i], pe = offsets[i] + numel_of(c, i);
    const size_t lo = pb > begin ? pb : begin, hi = pe < end ? pe : end;
    size_t so = 99, po = 99, len = 99;
    CHECK_OK(fsdp_param_shard_range(unit, i, &so, &po, &len));
    if (lo < hi)
      CHECK_MSG(so == lo - begin && po == lo - pb && len == hi - lo, c->label);
    else
      CHECK_MSG(len == 0, c->label);
  }

  for (int round = 0; round < 2; ++round) { /* the second round reuses the pooled buffer */
    CHECK_OK(fsdp_unshard(unit));
    int mismatches = 0;
    for (int i = 0; i < c->nparams; ++i) {
      void* p = NULL;
      CHECK_OK(fsdp_param_data(unit, i, &p));
      CHECK_MSG(((uintptr_t)p & 15u) == 0, "fsdp_param_data: a 16-byte aligned pointer");
      if (!p ||
          memcmp(p, init[i] ? values[i] : flat + offsets[i] * esize, numel_of(c, i) * esize) != 0)
        ++mismatches;
      if (null_entries && !init[i]) {
        for (size_t e = 0; e < numel_of(c, i); ++e)
          if (dtype == FSDP_FLOAT32 ? ((float*)p)[e] != 0.0f : ((double*)p)[e] != 0.0) ++mismatches;
      }
    }
    CHECK_MSG(mismatches == 0, c->label);
    CHECK_OK(fsdp_reshard(unit));
  }
  CHECK_OK(fsdp_unit_destroy(&unit));
  CHECK(unit == NULL);
  for (int i = 0; i < c->nparams; ++i) free(values[i]);
  free(flat);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_unshard");
  static layout_case_t cases[5];
  int ncases = 0;

  layout_case_t* c = &cases[ncases++];
  c->label = "sizes not multiples of F";
  c->nparams = 3;
  set_param(c, 0, 1, 7, 0, 0);
  set_param(c, 1, 2, 3, 5, 0);
  set_param(c, 2, 1, 11, 0, 0);

  c = &cases[ncases++];
  c->label = "unit smaller than F (one scalar)";
  c->nparams = 1;
  set_param(c, 0, 0, 0, 0, 0);

  c = &cases[ncases++];
  c->label = "hundreds of tiny parameters";
  c->nparams = 300;
  for (int i = 0; i < 300; ++i) set_param(c, i, 1, 1 + i % 3, 0, 0);

  c = &cases[ncases++];
  c->label = "parameters straddling shard boundaries";
  c->nparams = 4;
  set_param(c, 0, 2, 5, 3, 0);
  set_param(c, 1, 1, 17, 0, 0);
  set_param(c, 2, 3, 2, 2, 2);
  set_param(c, 3, 2, 100, 3, 0);

  c = &cases[ncases++];
  c->label = "two elements";
  c->nparams = 2;
  set_param(c, 0, 1, 1, 0, 0);
  set_param(c, 1, 1, 1, 0, 0);

  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  for (int k = 0; k < ncases; ++k) {
    run_case(ctx, &cases[k], FSDP_FLOAT32, 0);
    run_case(ctx, &cases[k], FSDP_FLOAT64, 0);
  }
  run_case(ctx, &cases[0], FSDP_FLOAT64, 1); /* some initial_values entries NULL: zeros */
  run_case(ctx, &cases[2], FSDP_FLOAT32, 1);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
