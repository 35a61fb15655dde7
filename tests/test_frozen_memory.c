/* Frozen parameters and memory accounting.
 *
 * A unit mixing trainable and frozen parameters (the LoRA case) unshards every parameter bit for
 * bit, reduces the trainable ones exactly, and holds gradient memory for the trainable ones only:
 * the sizes are computed here from the section rule (trainable first, each parameter at a
 * multiple of 8 elements, each section padded to F blocks of a multiple of 8 elements). Then FSDP's
 * parameter-memory formula: with one unit unsharded at a time, peak = K_full/F * sum(psi_i) + K_low
 * * max(psi_i) (sizes padded), for float32 and for a bfloat16 compute copy, whatever the order the
 * units are unsharded in, and through a training cycle for every param_dtype x reduce_dtype. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

/* The alignment fsdp.h promises: 8 elements. */
static size_t align8(size_t n) {
  return ceil_div(n, 8) * 8;
}

static double value(int p, size_t e) {
  uint64_t s = ((uint64_t)p << 36) ^ e ^ 0xf00dull;
  return th_uniform(&s);
}

static void check_frozen(fsdp_context_t ctx) {
  int F = 0, srank = 0;
  const int W = th_size();
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  /* base.w frozen, lora.a trainable, base.b frozen, lora.b trainable */
  const int64_t n[4] = {301, 13, 29, 7};
  const int trainable[4] = {0, 1, 0, 1};
  const char* names[4] = {"base.w", "lora.a", "base.b", "lora.b"};
  fsdp_param_desc_t d[4];
  float* values[4];
  for (int i = 0; i < 4; ++i) {
    d[i].name = names[i];
    d[i].ndim = 1;
    d[i].shape = &n[i];
    d[i].dtype = FSDP_FLOAT32;
    d[i].requires_grad = trainable[i];
    values[i] = malloc((size_t)n[i] * sizeof(float));
    for (int64_t e = 0; e < n[i]; ++e) values[i][e] = (float)value(i, (size_t)e);
  }
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 4, d, (const void* const*)values, &u));

  /* Sizes from the section rule. */
  /* lora.a then lora.b in the trainable section, base.w then base.b in the frozen one. */
  const size_t section_offset[4] = {0, 0, align8((size_t)n[0]), align8((size_t)n[1])};
  const size_t T_end = section_offset[3] + (size_t)n[3], Z_end = section_offset[2] + (size_t)n[2];
  const size_t T = (size_t)(n[1] + n[3]), Z = (size_t)(n[0] + n[2]);
  const size_t St = align8(ceil_div(T_end, (size_t)F)), Sz = align8(ceil_div(Z_end, (size_t)F));
  size_t numel = 0, padded = 0, shard_n = 0, grad_n = 0;
  CHECK_OK(fsdp_unit_numel(u, &numel, &padded, &shard_n));
  CHECK(numel == T + Z && padded == (St + Sz) * (size_t)F && shard_n == St + Sz);

  /* Where each parameter's slice sits: trainable ones in [0, St), frozen ones in [St, St+Sz). */
  int bad = 0;
  float* shard = NULL;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, NULL));
  for (int i = 0; i < 4; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    const size_t S = trainable[i] ? St : Sz, base = trainable[i] ? 0 : St;
    const size_t begin = section_offset[i], end = begin + (size_t)n[i];
    const size_t lo = begin > (size_t)srank * S ? begin : (size_t)srank * S;
    const size_t hi = end < (size_t)(srank + 1) * S ? end : (size_t)(srank + 1) * S;
    const size_t want_len = lo < hi ? hi - lo : 0;
    bad += len != want_len;
    if (want_len) bad += so != base + lo - (size_t)srank * S || po != lo - begin;
    for (size_t k = 0; k < len; ++k) bad += shard[so + k] != values[i][po + k];
  }
  CHECK_MSG(bad == 0, "each section's block of the shard holds its parameters' slices");

  CHECK_OK(fsdp_unshard(u));
  for (int i = 0; i < 4; ++i) {
    float* p = NULL;
    CHECK_OK(fsdp_param_data(u, i, (void**)&p));
    bad += memcmp(p, values[i], (size_t)n[i] * sizeof(float)) != 0;
  }
  CHECK_MSG(bad == 0, "unshard returns trainable and frozen parameters bit for bit");
  CHECK_OK(fsdp_reshard(u));

  /* Gradients: frozen ones refused; memory only for the trainable section. */
  void* g = NULL;
  CHECK_FAILS(fsdp_grad_data(u, 0, &g), FSDP_ERR_INVALID_ARGUMENT, "base.w");
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  CHECK_OK(fsdp_trim_pool(ctx)); /* else the pooled unsharded buffer, larger, serves the gradient */
  for (int i = 1; i < 4; i += 2) {
    float* gi = NULL;
    CHECK_OK(fsdp_grad_data(u, i, (void**)&gi));
    for (int64_t e = 0; e < n[i]; ++e) gi[e] = (float)((th_rank() + 1) * (i + (int)(e % 3)));
  }
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK_MSG(m.full_grad_bytes == St * (size_t)F * sizeof(float),
            "the full gradient covers the trainable section only");
  CHECK_OK(fsdp_reduce_grads(u));
  float* gs = NULL;
  CHECK_OK(fsdp_shard_grad(u, (void**)&gs, &grad_n));
  CHECK(grad_n == St);
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK_MSG(m.grad_shard_bytes == St * sizeof(float) && m.full_grad_bytes == 0,
            "the gradient shard covers the trainable section only");
  /* Exact reference: sum over ranks of (r+1) * (i + e%3), divided by W. */
  const int sum_r = W * (W + 1) / 2;
  for (size_t j = 0; j < St; ++j) {
    const size_t k = (size_t)srank * St + j; /* index in the trainable section */
    float want = 0.0f;
    const int i = k < section_offset[3] ? 1 : 3;
    const size_t e = k - section_offset[i];
    if (e < (size_t)n[i]) want = (float)(sum_r * (i + (int)(e % 3))) / (float)W; /* else padding */
    bad += gs[j] != want;
  }
  CHECK_MSG(bad == 0, "trainable gradients reduce exactly around frozen parameters");
  CHECK_OK(fsdp_unit_destroy(&u));

  /* All frozen: no gradient shard at all. */
  d[1].requires_grad = d[3].requires_grad = 0;
  CHECK_OK(fsdp_unit_create(ctx, 4, d, NULL, &u));
  CHECK_OK(fsdp_shard_grad(u, NULL, &grad_n));
  CHECK(grad_n == 0);
  CHECK_FAILS(fsdp_shard_grad(u, (void**)&gs, NULL), FSDP_ERR_INVALID_ARGUMENT, "frozen");
  CHECK_OK(fsdp_unit_destroy(&u));
  for (int i = 0; i < 4; ++i) free(values[i]);
}

/* Units of known sizes for the formula, in `param` compute and `reduce` communication dtypes, with
 * what the formula charges: K_full/F * sum(psi_i), K_low * max(psi_i) (an unsharded buffer is
 * charged 1/sharers to each rank sharing it; nothing under zero-copy storage, where the unsharded
 * copy is the shards), and the largest full gradient with its reduce_dtype copy. */
enum { UNITS = 3 };
typedef struct {
  fsdp_unit_t u[UNITS];
  size_t k_full_sum, k_low_max, grads_max;
} formula_t;

static size_t dsize(fsdp_dtype_t t) {
  return t == FSDP_FLOAT32 ? 4 : 2;
}

/* With `frozen`, each unit also holds a frozen parameter half its trainable one's size: the
 * unsharded buffer covers both sections, the full gradient the trainable one only. */
static formula_t make_units(fsdp_context_t ctx, fsdp_dtype_t param, fsdp_dtype_t reduce,
                            int frozen) {
  static const int64_t psi[UNITS] = {1000, 70001, 4099};
  int F = 0;
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param;
  o.reduce_dtype = reduce;
  formula_t f = {{NULL}, 0, 0, 0};
  for (int i = 0; i < UNITS; ++i) {
    const int64_t half = psi[i] / 2;
    fsdp_param_desc_t d[2] = {{"w", 1, &psi[i], FSDP_FLOAT32, 1}, {"f", 1, &half, FSDP_FLOAT32, 0}};
    CHECK_OK(fsdp_unit_create_ex(ctx, frozen ? 2 : 1, d, NULL, &o, &f.u[i]));
    const size_t trainable = align8(ceil_div((size_t)psi[i], (size_t)F));
    const size_t shard = trainable + (frozen ? align8(ceil_div((size_t)half, (size_t)F)) : 0);
    const size_t padded = shard * (size_t)F, grad_padded = trainable * (size_t)F;
    f.k_full_sum += 4 * shard;
    int zero_copy = 0; /* the shards in place (one section, no conversion): nothing to charge */
    CHECK_OK(fsdp_unit_zero_copy(f.u[i], &zero_copy));
    const size_t unsharded = zero_copy ? 0 : dsize(param) * padded / th_unsharded_sharers(ctx);
    if (unsharded > f.k_low_max) f.k_low_max = unsharded;
    const size_t grads =
        dsize(param) * grad_padded + (reduce != param ? dsize(reduce) * grad_padded : 0);
    if (grads > f.grads_max) f.grads_max = grads;
  }
  CHECK_OK(fsdp_trim_pool(ctx));
  CHECK_OK(fsdp_reset_peak_memory(ctx));
  return f;
}

static void peak_check(fsdp_context_t ctx, const formula_t* f, const char* label,
                       fsdp_memory_stats_t* m) {
  m->size = sizeof *m;
  CHECK_OK(fsdp_memory_stats(ctx, m));
  char msg[200];
  snprintf(msg, sizeof msg, "%s: peak parameter bytes %zu == formula %zu", label,
           m->peak_parameter_bytes, f->k_full_sum + f->k_low_max);
  CHECK_MSG(m->peak_parameter_bytes == f->k_full_sum + f->k_low_max, msg);
}

/* The formula, for units unsharded one at a time in `order`. */
static void check_formula(fsdp_context_t ctx, fsdp_dtype_t param, const int* order,
                          const char* label) {
  formula_t f = make_units(ctx, param, param, 0);
  for (int pass = 0; pass < 2; ++pass) /* the second pass reuses pooled buffers */
    for (int k = 0; k < UNITS; ++k) {
      CHECK_OK(fsdp_unshard(f.u[order[k]]));
      CHECK_OK(fsdp_reshard(f.u[order[k]]));
    }
  fsdp_memory_stats_t m;
  peak_check(ctx, &f, label, &m);
  char msg[200];
  snprintf(msg, sizeof msg, "%s: peak of everything held %zu == formula %zu (the pool adds none)",
           label, m.peak_bytes, f.k_full_sum + f.k_low_max);
  CHECK_MSG(m.peak_bytes == f.k_full_sum + f.k_low_max, msg);
  CHECK(m.shard_bytes == f.k_full_sum && m.unsharded_bytes == 0);
  for (int i = 0; i < UNITS; ++i) CHECK_OK(fsdp_unit_destroy(&f.u[i]));
}

/* The formula through a training cycle (unshard, write the gradient, reshard, reduce), one unit at
 * a time, for a param_dtype x reduce_dtype combination: peak parameter bytes equal the formula
 * exactly, and the full gradients' peak is one unit's gradient in param_dtype plus, when
 * reduce_dtype differs, its reduce_dtype copy (both live while it is converted). Every buffer is
 * charged what the pool handed out, so a buffer served larger than the formula's shows here. */
static void check_cycle(fsdp_context_t ctx, fsdp_dtype_t param, fsdp_dtype_t reduce, int frozen) {
  formula_t f = make_units(ctx, param, reduce, frozen);
  static const int order[3][UNITS] = {{1, 0, 2}, {2, 0, 1}, {2, 0, 1}};
  uint64_t steady = 0;
  for (int pass = 0; pass < 3; ++pass) { /* later passes reuse pooled buffers */
    if (pass == 2) steady = th_allocation_calls(ctx);
    for (int k = 0; k < UNITS; ++k) {
      fsdp_unit_t v = f.u[order[pass][k]];
      void* g = NULL;
      CHECK_OK(fsdp_unshard(v));
      CHECK_OK(fsdp_grad_data(v, 0, &g));
      CHECK_OK(fsdp_reshard(v));
      CHECK_OK(fsdp_reduce_grads(v));
    }
  }
  char label[64];
  snprintf(label, sizeof label, "param %d, reduce %d%s", (int)param, (int)reduce,
           frozen ? ", frozen sections" : "");
  fsdp_memory_stats_t m;
  peak_check(ctx, &f, label, &m);
  char msg[200];
  snprintf(msg, sizeof msg, "%s: peak full-gradient bytes %zu == %zu", label,
           m.peak_full_grad_bytes, f.grads_max);
  CHECK_MSG(m.peak_full_grad_bytes == f.grads_max, msg);
  snprintf(msg, sizeof msg, "%s: a repeated pass allocates nothing (%llu allocations)", label,
           (unsigned long long)(th_allocation_calls(ctx) - steady));
  CHECK_MSG(th_allocation_calls(ctx) == steady, msg);
  for (int i = 0; i < UNITS; ++i) CHECK_OK(fsdp_unit_destroy(&f.u[i]));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_frozen_memory");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  check_frozen(ctx);
  static const int up[3] = {0, 2, 1}, down[3] = {1, 2, 0}, mixed[3] = {2, 1, 0};
  check_formula(ctx, FSDP_FLOAT32, up, "float32, increasing sizes");
  check_formula(ctx, FSDP_FLOAT32, down, "float32, decreasing sizes");
  check_formula(ctx, FSDP_BFLOAT16, mixed, "bfloat16 compute copy");
  static const fsdp_dtype_t dtypes[3] = {FSDP_FLOAT32, FSDP_BFLOAT16, FSDP_FLOAT16};
  for (int p = 0; p < 3; ++p)
    for (int r = 0; r < 3; ++r)
      for (int frozen = 0; frozen < 2; ++frozen) check_cycle(ctx, dtypes[p], dtypes[r], frozen);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
