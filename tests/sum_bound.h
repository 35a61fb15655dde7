/* The error bound of a mean of W rank values summed in any order in a reduce dtype of unit
 * roundoff u and stored in float32: |computed - exact| <= (W u + u_float32) * sum_r |x_r| / W
 * (W - 1 additions each within u of their partial sum, whose magnitude never exceeds the sum of
 * magnitudes, plus the rounding of the stored mean). Shared by the tests that compare sums made in
 * different orders: test_sum_bounds (two host transports) and tests/gpu/test_gpu_training.c
 * (NCCL against the host). */
#ifndef FSDP_TEST_SUM_BOUND_H
#define FSDP_TEST_SUM_BOUND_H

#include <math.h>
#include <stdlib.h>

#define SUM_BOUND_U_FLOAT32 (1.0 / 16777216.0) /* 2^-24 */
#define SUM_BOUND_U_BFLOAT16 (1.0 / 256.0)     /* 2^-8 */

/* mean_abs: sum_r |x_r| / W for the element. */
static inline double sum_bound(double mean_abs, int W, double u) {
  return (W * u + SUM_BOUND_U_FLOAT32) * mean_abs;
}

/* The bound for each of sn elements of a shard starting at flat position `first` of an n-element
 * gradient, from every rank's values: gradient(g, r, arg) writes rank r's n values into g. */
static inline void sum_bounds(double* tol, size_t sn, size_t first, int n, int W, double u,
                              void (*gradient)(float* g, int r, const void* arg), const void* arg) {
  float* g = (float*)malloc((size_t)n * sizeof(float));
  for (size_t j = 0; j < sn; ++j) tol[j] = 0.0;
  for (int r = 0; r < W; ++r) {
    gradient(g, r, arg);
    for (size_t j = 0; j < sn; ++j)
      if (first + j < (size_t)n) tol[j] += fabs(g[first + j]) / W;
  }
  for (size_t j = 0; j < sn; ++j) tol[j] = sum_bound(tol[j], W, u);
  free(g);
}

#endif
