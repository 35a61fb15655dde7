/* The error bound of a mean of W rank values summed in any order in a reduce dtype of unit
 * roundoff u and stored in float32: |computed - exact| <= (W u + u_float32) * sum_r |x_r| / W
 * (W - 1 additions each within u of their partial sum, whose magnitude never exceeds the sum of
 * magnitudes, plus the rounding of the stored mean). Shared by the tests that compare sums made in
 * different orders: test_sum_bounds (two host transports) and tests/gpu/test_gpu_training.c
 * (NCCL against the host). */
#ifndef FSDP_TEST_SUM_BOUND_H
#define FSDP_TEST_SUM_BOUND_H

#define SUM_BOUND_U_FLOAT32 (1.0 / 16777216.0) /* 2^-24 */
#define SUM_BOUND_U_BFLOAT16 (1.0 / 256.0)     /* 2^-8 */

/* mean_abs: sum_r |x_r| / W for the element. */
static inline double sum_bound(double mean_abs, int W, double u) {
  return (W * u + SUM_BOUND_U_FLOAT32) * mean_abs;
}

#endif
