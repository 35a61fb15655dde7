/* fsdp_reduce_grads leaves each rank exactly its slice of the mean (or sum) of all ranks' full
 * gradients, accumulated over calls; fsdp_zero_grads clears it.
 *
 * Exact checks use integer-valued gradients: every partial sum is an integer below 2^24, exact in
 * float32 and float64 whatever order the ranks are summed in, so the library's sum equals the
 * reference sum bit for bit, and so does the division by W (one correctly rounded operation on
 * equal operands).
 *
 * Random gradients check the general case against a long double reference, with the classical
 * bound for summing W terms in any order: |error| <= (W-1) u sum_r |g_r| + u |mean|, u the unit
 * roundoff of the dtype (the second term is the division's rounding). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const int64_t shapes[3][2] = {{13, 1}, {4, 6}, {1, 1}};
static const int ndims[3] = {1, 2, 0};

static fsdp_unit_t make_unit(fsdp_context_t ctx, fsdp_dtype_t t) {
  fsdp_param_desc_t d[3];
  const char* names[3] = {"w", "m", "s"};
  for (int i = 0; i < 3; ++i) {
    d[i].name = names[i];
    d[i].ndim = ndims[i];
    d[i].shape = shapes[i];
    d[i].dtype = t;
    d[i].requires_grad = 1;
  }
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 3, d, NULL, &u));
  return u;
}

/* Rank r's gradient for flat element k in round `round`: a small integer. */
static double int_grad(int r, size_t k, int round) {
  return (double)((int)((r + 1) * (int)(k % 5 + 1) + round * 7) % 23 - 11);
}

static double rand_grad(int r, size_t k, int round) {
  uint64_t s = ((uint64_t)r << 40) ^ ((uint64_t)round << 32) ^ k;
  return th_uniform(&s);
}

typedef double (*grad_fn)(int, size_t, int);

/* Writes this rank's gradient for every parameter through fsdp_grad_data: element e of parameter
 * i gets the value of its flat position (fsdp.h's layout, computed by the harness). */
static void write_grads(fsdp_unit_t u, fsdp_dtype_t t, grad_fn g, int round) {
  for (int i = 0; i < 3; ++i) {
    void* p = NULL;
    size_t n = 0;
    CHECK_OK(fsdp_param_numel(u, i, &n));
    CHECK_OK(fsdp_grad_data(u, i, &p));
    const size_t offset = th_param_offset(u, i);
    for (size_t e = 0, flat = offset; e < n; ++e, ++flat) {
      if (t == FSDP_FLOAT32)
        ((float*)p)[e] = (float)g(th_rank(), flat, round);
      else
        ((double*)p)[e] = g(th_rank(), flat, round);
    }
  }
}

static double load(const void* base, size_t k, fsdp_dtype_t t) {
  return t == FSDP_FLOAT32 ? (double)((const float*)base)[k] : ((const double*)base)[k];
}

/* Writes and reduces rounds [first, first + rounds) of gradients from `g`; returns the gradient
 * shard, its length, the unit's element count and this rank's shard index. */
static void* reduce_rounds(fsdp_context_t ctx, fsdp_unit_t u, fsdp_dtype_t t, grad_fn g, int first,
                           int rounds, size_t* numel, size_t* shard_n, int* srank) {
  CHECK_OK(fsdp_unit_numel(u, numel, NULL, shard_n));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, srank, NULL));
  for (int round = first; round < first + rounds; ++round) {
    write_grads(u, t, g, round);
    CHECK_OK(fsdp_reduce_grads(u));
  }
  void* shard = NULL;
  CHECK_OK(fsdp_shard_grad(u, &shard, NULL));
  return shard;
}

/* Mismatches between shard `g` and the exact reduction of integer rounds [first, first + rounds),
 * accumulated in order. */
static int exact_mismatches(fsdp_unit_t u, const void* g, fsdp_dtype_t t, size_t shard_n, int srank,
                            int first, int rounds, int mean) {
  const int W = th_size();
  int bad = 0;
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t k = (size_t)srank * shard_n + j;
    float ref_f = 0.0f;
    double ref_d = 0.0;
    for (int round = first; round < first + rounds; ++round) {
      double sum = 0.0; /* exact: integers; padding reduces to zero */
      if (th_flat_param(u, k, NULL) >= 0)
        for (int r = 0; r < W; ++r) sum += int_grad(r, k, round);
      ref_f += mean ? (float)sum / (float)W : (float)sum;
      ref_d += mean ? sum / (double)W : sum;
    }
    const double got = load(g, j, t);
    if (t == FSDP_FLOAT32 ? (float)got != ref_f : got != ref_d) ++bad;
  }
  return bad;
}

/* Integer gradients, `rounds` accumulated reductions: bitwise equal to the reference. Then
 * fsdp_zero_grads: the shard reads zero, and the next reduction replaces what the memory held. */
static void check_exact(fsdp_context_t ctx, fsdp_dtype_t t, int rounds, int mean) {
  fsdp_unit_t u = make_unit(ctx, t);
  size_t numel = 0, shard_n = 0;
  int srank = 0;
  CHECK_OK(fsdp_zero_grads(u));
  void* g = reduce_rounds(ctx, u, t, int_grad, 0, rounds, &numel, &shard_n, &srank);
  char label[96];
  snprintf(label, sizeof label, "exact %s, %d round(s), %s", t == FSDP_FLOAT32 ? "f32" : "f64",
           rounds, mean ? "mean" : "sum");
  CHECK_MSG(exact_mismatches(u, g, t, shard_n, srank, 0, rounds, mean) == 0, label);

  CHECK_OK(fsdp_zero_grads(u));
  void* zeroed = NULL;
  CHECK_OK(fsdp_shard_grad(u, &zeroed, NULL));
  CHECK(zeroed == g); /* the same memory, now holding zeros */
  int bad = 0;
  for (size_t j = 0; j < shard_n; ++j) bad += load(zeroed, j, t) != 0.0;
  CHECK_MSG(bad == 0, "fsdp_shard_grad after fsdp_zero_grads reads zeros");

  /* Round 5 lands in the memory; zero_grads without a fetch; round 7 alone must remain. */
  reduce_rounds(ctx, u, t, int_grad, 5, 1, &numel, &shard_n, &srank);
  CHECK_OK(fsdp_zero_grads(u));
  g = reduce_rounds(ctx, u, t, int_grad, 7, 1, &numel, &shard_n, &srank);
  CHECK_MSG(exact_mismatches(u, g, t, shard_n, srank, 7, 1, mean) == 0,
            "a reduce after fsdp_zero_grads replaces the old gradient");
  CHECK_OK(fsdp_unit_destroy(&u));
}

/* Random gradients: within the stated bound; and two identical runs give identical bits. */
static void check_random(fsdp_context_t ctx, fsdp_dtype_t t) {
  const int W = th_size();
  const double u_round = t == FSDP_FLOAT32 ? ldexp(1.0, -24) : ldexp(1.0, -53);
  const size_t esize = t == FSDP_FLOAT32 ? 4 : 8;
  void* first = NULL;
  for (int run = 0; run < 2; ++run) {
    fsdp_unit_t u = make_unit(ctx, t);
    size_t numel = 0, shard_n = 0;
    int srank = 0;
    void* g = reduce_rounds(ctx, u, t, rand_grad, 0, 1, &numel, &shard_n, &srank);
    int bad = 0;
    for (size_t j = 0; j < shard_n; ++j) {
      const size_t k = (size_t)srank * shard_n + j;
      long double sum = 0.0L, abs_sum = 0.0L;
      if (th_flat_param(u, k, NULL) >= 0)
        for (int r = 0; r < W; ++r) {
          const double x =
              t == FSDP_FLOAT32 ? (double)(float)rand_grad(r, k, 0) : rand_grad(r, k, 0);
          sum += x;
          abs_sum += fabsl((long double)x);
        }
      const long double mean = sum / W;
      const long double bound = (W - 1) * u_round * abs_sum + u_round * fabsl(mean);
      if (fabsl((long double)load(g, j, t) - mean) > bound) ++bad;
    }
    CHECK_MSG(bad == 0, t == FSDP_FLOAT32 ? "random f32 within bound" : "random f64 within bound");
    if (run == 0) {
      first = malloc(shard_n * esize);
      memcpy(first, g, shard_n * esize);
    } else {
      CHECK_MSG(memcmp(first, g, shard_n * esize) == 0, "deterministic: identical bits twice");
      free(first);
    }
    CHECK_OK(fsdp_unit_destroy(&u));
  }
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_reduce_grads");
  fsdp_context_t mean_ctx = NULL, sum_ctx = NULL;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &mean_ctx));
  cfg.grad_reduction = FSDP_REDUCE_SUM;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &sum_ctx));
  const fsdp_dtype_t types[2] = {FSDP_FLOAT32, FSDP_FLOAT64};
  for (int k = 0; k < 2; ++k) {
    check_exact(mean_ctx, types[k], 1, 1);
    check_exact(mean_ctx, types[k], 3, 1);
    check_exact(sum_ctx, types[k], 2, 0);
    check_random(mean_ctx, types[k]);
  }
  CHECK_OK(fsdp_finalize(&sum_ctx));
  CHECK_OK(fsdp_finalize(&mean_ctx));
  return th_finish();
}
