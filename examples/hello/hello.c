/* hello: one unit on every rank: unshard, read it, write a gradient, reduce, finalize.
 *   mpiexec -n 2 ./hello_c */
#include <stdio.h>

#include "fsdp.h"

#define TRY(call)                                 \
  do {                                            \
    if ((call) != FSDP_SUCCESS) {                 \
      fprintf(stderr, "%s\n", fsdp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);               \
    }                                             \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, NULL, &ctx)); /* full sharding over all ranks */
  int rank = 0, world = 1;
  TRY(fsdp_group_info(ctx, FSDP_GROUP_WORLD, &rank, &world));

  /* One unit holding a 3 x 4 weight; each rank keeps 1/world of the unit (padded to blocks of a
   multiple of 8 elements: on 3 ranks, rank 2's block is only padding). */
  float w[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const int64_t shape[2] = {3, 4};
  fsdp_param_desc_t desc = {"weight", 2, shape, FSDP_FLOAT32, 1};
  const void* init[1] = {w};
  fsdp_unit_t unit = NULL;
  TRY(fsdp_unit_create(ctx, 1, &desc, init, &unit));

  TRY(fsdp_unshard(unit)); /* all-gather: the whole weight, row-major */
  float* full = NULL;
  TRY(fsdp_param_data(unit, 0, (void**)&full));
  printf("rank %d of %d: weight[1][2] = %g\n", rank, world, full[1 * 4 + 2]);
  int ok = full[1 * 4 + 2] == 7.0f;
  TRY(fsdp_reshard(unit));

  float* grad = NULL; /* every rank's gradient is its rank + 1 */
  TRY(fsdp_grad_data(unit, 0, (void**)&grad));
  for (int i = 0; i < 12; ++i) grad[i] = (float)(rank + 1);
  TRY(fsdp_reduce_grads(unit)); /* reduce-scatter: the mean, sharded */
  float* shard = NULL;
  TRY(fsdp_shard_grad(unit, (void**)&shard, NULL));
  size_t at = 0, n = 0; /* where this rank's part of the weight sits in its shard */
  TRY(fsdp_param_shard_range(unit, 0, &at, NULL, &n));
  const float expected = (float)((world + 1) / 2.0);
  for (size_t i = 0; i < n; ++i) ok = ok && shard[at + i] == expected;
  printf("rank %d: %zu gradient element(s) of the weight, each %g (expected %g)\n", rank, n,
         n ? shard[at] : expected, expected);

  TRY(fsdp_finalize(&ctx));
  MPI_Finalize();
  return ok ? 0 : 1;
}
