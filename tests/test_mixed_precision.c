/* Mixed precision: unsharded parameters are the float32 master rounded to bfloat16 / float16
 * (nearest even, NaN and infinities kept, float16 subnormals exact), checked against an
 * independent reference rounding; gradients written in 16 bits and reduced in 16 or 32 bits land
 * in the float32 gradient shard exactly as a non-sharded reference computes them (integer
 * gradients: every partial sum is exact in every dtype, so any summation order gives the same
 * bits); the memory held while unsharded is the 16-bit size. Full and hybrid sharding. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "precision_ref.h"

#define N0 1003 /* odd sizes: padding in every shard */
#define N1 37
#define OFFSET1 1008 /* parameter 1 starts at a multiple of 8 elements (fsdp.h) */

/* Parameter values: specials first, then values that exercise rounding (ties, subnormals,
 * overflow in float16), then random ones. */
static float param_value(int p, size_t e) {
  static const float specials[] = {0.0f,     -0.0f,     1.0f,          -2.5f,       65504.0f,
                                   65520.0f, 70000.0f,  6.0e-8f,       2.9e-8f,     3.0e-5f,
                                   1e-40f,   -1.5e-40f, FLT_MAX,       1.00390625f, 1.01171875f,
                                   2049.0f,  2051.0f,   1.0f + 0x1p-8f};
  const size_t ns = sizeof specials / sizeof specials[0];
  if (p == 0 && e < ns) return specials[e];
  if (p == 0 && e == ns) return INFINITY;
  if (p == 0 && e == ns + 1) return -INFINITY;
  if (p == 0 && e == ns + 2) return NAN;
  uint64_t s = ((uint64_t)p << 40) ^ e ^ 0xabcdull;
  return (float)(th_uniform(&s) * ldexp(1.0, (int)(e % 40) - 20));
}

static const char* dtype_label(fsdp_dtype_t t) {
  return t == FSDP_BFLOAT16 ? "bfloat16" : t == FSDP_FLOAT16 ? "float16" : "float32";
}

static ref_format_t format_of(fsdp_dtype_t t) {
  return t == FSDP_BFLOAT16 ? REF_BF16 : REF_F16;
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, fsdp_dtype_t param, fsdp_dtype_t reduce,
                             float* values[2]) {
  static const int64_t s0[1] = {N0}, s1[1] = {N1};
  fsdp_param_desc_t d[2] = {{"w", 1, s0, FSDP_FLOAT32, 1}, {"b", 1, s1, FSDP_FLOAT32, 1}};
  values[0] = malloc(N0 * sizeof(float));
  values[1] = malloc(N1 * sizeof(float));
  for (size_t e = 0; e < N0; ++e) values[0][e] = param_value(0, e);
  for (size_t e = 0; e < N1; ++e) values[1][e] = param_value(1, e);
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param;
  o.reduce_dtype = reduce;
  o.name = "mixed";
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 2, d, (const void* const*)values, &o, &u));
  return u;
}

static void check_unshard(fsdp_context_t ctx, fsdp_dtype_t param) {
  float* values[2];
  fsdp_unit_t u = make_unit(ctx, param, FSDP_DTYPE_AUTO, values);
  fsdp_dtype_t storage, p, r;
  CHECK_OK(fsdp_unit_precision(u, &storage, &p, &r));
  CHECK(storage == FSDP_FLOAT32 && p == param && r == param);
  size_t padded = 0;
  CHECK_OK(fsdp_unit_numel(u, NULL, &padded, NULL));
  CHECK_OK(fsdp_unshard(u));
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK_MSG(m.unsharded_bytes == padded * 2 / th_unsharded_sharers(ctx),
            "the unsharded buffer holds 16-bit elements");
  int bad = 0;
  for (int i = 0; i < 2; ++i) {
    const uint16_t* got = NULL;
    CHECK_OK(fsdp_param_data(u, i, (void**)&got));
    const size_t n = i ? N1 : N0;
    for (size_t e = 0; e < n; ++e) {
      const double want = ref_round(values[i][e], format_of(param));
      const double have = ref_decode(got[e], format_of(param));
      if (!same_value(want, have)) {
        if (bad++ < 5)
          fprintf(stderr, "rank %d %s param %d elem %zu: %.9g -> 0x%04x (%.9g), want %.9g\n",
                  th_rank(), dtype_label(param), i, e, values[i][e], got[e], have, want);
      }
    }
  }
  char label[64];
  snprintf(label, sizeof label, "unshard rounds to %s like the reference", dtype_label(param));
  CHECK_MSG(bad == 0, label);
  CHECK_OK(fsdp_reshard(u));
  CHECK_OK(fsdp_unit_destroy(&u));
  free(values[0]), free(values[1]);
}

/* Every float32 class: 2^20 random bit patterns, plus every bfloat16 tie (low half 0x8000). */
static void check_conversion_sweep(fsdp_context_t ctx, fsdp_dtype_t param) {
  enum { RANDOM = 1 << 20, TIES = 1 << 16 };
  const int64_t shape[1] = {RANDOM + TIES};
  fsdp_param_desc_t d = {"sweep", 1, shape, FSDP_FLOAT32, 0};
  uint32_t* bits = malloc((size_t)shape[0] * sizeof *bits);
  uint64_t s = 0x5eed5eedull;
  for (size_t e = 0; e < RANDOM; ++e) bits[e] = (uint32_t)((th_uniform(&s) + 1.0) * 2147483648.0);
  for (uint32_t h = 0; h < TIES; ++h) bits[RANDOM + h] = (h << 16) | 0x8000u;
  const void* values[1] = {bits};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 1, &d, values, &o, &u));
  CHECK_OK(fsdp_unshard(u));
  const uint16_t* got = NULL;
  CHECK_OK(fsdp_param_data(u, 0, (void**)&got));
  int bad = 0;
  for (size_t e = 0; e < (size_t)shape[0]; ++e) {
    float f;
    memcpy(&f, &bits[e], sizeof f);
    const double want = ref_round(f, format_of(param));
    const double have = ref_decode(got[e], format_of(param));
    if (!same_value(want, have) && bad++ < 5)
      fprintf(stderr, "%s: 0x%08x -> 0x%04x, want %.9g\n", dtype_label(param), bits[e], got[e],
              want);
  }
  char label[64];
  snprintf(label, sizeof label, "%d float32 patterns round to %s like the reference", (int)shape[0],
           dtype_label(param));
  CHECK_MSG(bad == 0, label);
  CHECK_OK(fsdp_reshard(u));
  CHECK_OK(fsdp_unit_destroy(&u));
  free(bits);
}

/* Integer gradients in [-8, 8]: exact in bfloat16 and float16, and so is any sum of up to 4. */
static double grad_value(int rank, int p, size_t e, int round) {
  return (double)((int)((rank + 3) * (int)(e % 7 + 1) + p * 5 + round * 3) % 17 - 8);
}

/* ref_encode searches all 65536 patterns: cache the integers in [-8, 8] per format. */
static uint16_t encode_small_int(double v, fsdp_dtype_t t) {
  static uint16_t table[2][17];
  static int filled[2];
  const int f = t == FSDP_BFLOAT16 ? 0 : 1;
  if (!filled[f]) {
    for (int k = -8; k <= 8; ++k) table[f][k + 8] = ref_encode((double)k, format_of(t));
    filled[f] = 1;
  }
  return table[f][(int)v + 8];
}

static void check_reduce(fsdp_context_t ctx, fsdp_dtype_t param, fsdp_dtype_t reduce) {
  const int W = th_size();
  float* values[2];
  fsdp_unit_t u = make_unit(ctx, param, reduce, values);
  size_t shard_n = 0;
  int srank = 0;
  CHECK_OK(fsdp_unit_numel(u, NULL, NULL, &shard_n));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  const int rounds = 2; /* the second accumulates onto the first */
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < 2; ++i) {
      void* g = NULL;
      CHECK_OK(fsdp_grad_data(u, i, &g));
      const size_t n = i ? N1 : N0;
      for (size_t e = 0; e < n; ++e) {
        const double v = grad_value(th_rank(), i, e, round);
        if (param == FSDP_FLOAT32)
          ((float*)g)[e] = (float)v;
        else
          ((uint16_t*)g)[e] = encode_small_int(v, param);
      }
    }
    CHECK_OK(fsdp_reduce_grads(u));
  }
  float* shard = NULL;
  size_t grad_n = 0;
  CHECK_OK(fsdp_shard_grad(u, (void**)&shard, &grad_n));
  CHECK(grad_n == shard_n);
  int bad = 0;
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t k = (size_t)srank * shard_n + j; /* flat index */
    const int p = k < OFFSET1 ? 0 : 1;
    const size_t e = p ? k - OFFSET1 : k;
    float want = 0.0f;
    for (int round = 0; round < rounds; ++round) {
      double sum = 0.0;
      if (e < (p ? N1 : N0)) /* else padding */
        for (int r = 0; r < W; ++r) sum += grad_value(r, p, e, round);
      /* The float32 mean, or (a 16-bit reduce into the float32 shard) the sum and its
       * division each rounded to reduce_dtype, as PyTorch's reduce-scatter rounds them. */
      float mean = (float)sum / (float)W;
      if (reduce != FSDP_FLOAT32)
        mean = (float)ref_round((float)ref_round(sum, format_of(reduce)) / (float)W,
                                format_of(reduce));
      want += mean;
    }
    if (shard[j] != want && bad++ < 5)
      fprintf(stderr, "rank %d elem %zu: %g, want %g\n", th_rank(), k, shard[j], want);
  }
  char label[96];
  snprintf(label, sizeof label, "gradients in %s reduced in %s equal the reference",
           dtype_label(param), dtype_label(reduce));
  CHECK_MSG(bad == 0, label);
  CHECK_OK(fsdp_unit_destroy(&u));
  free(values[0]), free(values[1]);
}

static void run(fsdp_context_t ctx) {
  check_unshard(ctx, FSDP_BFLOAT16);
  check_unshard(ctx, FSDP_FLOAT16);
  if (th_size() <= 2) { /* the conversion does not depend on the rank count; keep np3/np4 fast */
    check_conversion_sweep(ctx, FSDP_BFLOAT16);
    check_conversion_sweep(ctx, FSDP_FLOAT16);
  }
  check_reduce(ctx, FSDP_BFLOAT16, FSDP_BFLOAT16);
  check_reduce(ctx, FSDP_BFLOAT16, FSDP_FLOAT32);
  check_reduce(ctx, FSDP_FLOAT16, FSDP_FLOAT16);
  check_reduce(ctx, FSDP_FLOAT32, FSDP_BFLOAT16);
}

/* A context-wide param_dtype applies to units that do not override it. */
static void check_context_default(void) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.param_dtype = FSDP_FLOAT16;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  const int64_t shape[1] = {5};
  fsdp_param_desc_t d = {"x", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, &u));
  fsdp_dtype_t p = FSDP_FLOAT32, r = FSDP_FLOAT32;
  CHECK_OK(fsdp_unit_precision(u, NULL, &p, &r));
  CHECK_MSG(p == FSDP_FLOAT16 && r == FSDP_FLOAT16, "context param_dtype; reduce follows it");
  /* float64 parameters cannot compute in 16 bits: refused on every rank, nothing created. */
  d.dtype = FSDP_FLOAT64;
  fsdp_unit_t v = NULL;
  CHECK_FAILS(fsdp_unit_create(ctx, 1, &d, NULL, &v), FSDP_ERR_INVALID_ARGUMENT, "float64");
  CHECK(v == NULL);
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.reduce_dtype = (fsdp_dtype_t)7;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, 1, &d, NULL, &o, &v), FSDP_ERR_INVALID_ARGUMENT,
              "options->reduce_dtype");
  CHECK_OK(fsdp_unit_destroy(&u));
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_mixed_precision");
  th_run_full_and_hybrid(run); /* hybrid: the 16-bit all-reduce across shard groups */
  check_context_default();
  return th_finish();
}
