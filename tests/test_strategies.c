/* Hybrid sharding (F = 2 and the per-node default) and replication (F = 1) agree with full
 * sharding: the groups are the communicator splits the paper describes, unshard gives the same
 * parameters, and every rank's gradient shard is its slice of the same mean. Gradients are
 * integer-valued, so "agree" is checked bit for bit (see test_reduce_grads.c). */
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define N_A 37
#define N_B 10

static double param_value(size_t k) {
  return (double)(k * 3 % 17) - 8.5;
}
static double grad_value(int r, size_t k) {
  return (double)((r * 5 + (int)k) % 13) - 6.0;
}

static void check_strategy(fsdp_sharding_strategy_t strategy, int factor, int want_f,
                           const char* label) {
  const int W = th_size(), rank = th_rank();
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = strategy;
  cfg.sharding_factor = factor;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  int f = 0, srank = -1, ssize = 0, rrank = -1, rsize = 0;
  CHECK_OK(fsdp_context_config(ctx, &f, NULL, NULL));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, &ssize));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_REPLICATE, &rrank, &rsize));
  /* One node here, so node-major order is world order: shard group rank / F, index rank % F. */
  CHECK_MSG(f == want_f && ssize == want_f && rsize == W / want_f, label);
  CHECK_MSG(srank == rank % want_f && rrank == rank / want_f, label);

  /* The replicate group holds the ranks with the same shard index: check by exchanging it. */
  MPI_Comm replicas;
  MPI_Comm_split(MPI_COMM_WORLD, rank % want_f, rank, &replicas);
  int members = 0;
  MPI_Comm_size(replicas, &members);
  CHECK_MSG(members == rsize, label);
  MPI_Comm_free(&replicas);

  const int64_t shape_a[1] = {N_A}, shape_b[2] = {2, N_B / 2};
  fsdp_param_desc_t d[2] = {{"a", 1, shape_a, FSDP_FLOAT64, 1}, {"b", 2, shape_b, FSDP_FLOAT64, 1}};
  double a[N_A], b[N_B];
  for (size_t k = 0; k < N_A; ++k) a[k] = param_value(k);
  for (size_t k = 0; k < N_B; ++k) b[k] = param_value(N_A + k);
  const void* init[2] = {a, b};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 2, d, init, &u));

  CHECK_OK(fsdp_unshard(u));
  double *pa = NULL, *pb = NULL;
  CHECK_OK(fsdp_param_data(u, 0, (void**)&pa));
  CHECK_OK(fsdp_param_data(u, 1, (void**)&pb));
  CHECK_MSG(memcmp(pa, a, sizeof a) == 0 && memcmp(pb, b, sizeof b) == 0, label);
  CHECK_OK(fsdp_reshard(u));

  double *ga = NULL, *gb = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, (void**)&ga));
  CHECK_OK(fsdp_grad_data(u, 1, (void**)&gb));
  for (size_t k = 0; k < N_A; ++k) ga[k] = grad_value(rank, k);
  for (size_t k = 0; k < N_B; ++k) gb[k] = grad_value(rank, N_A + k);
  CHECK_OK(fsdp_reduce_grads(u));

  /* Through the per-parameter view: each piece this rank holds equals the reference mean. */
  double* g = NULL;
  CHECK_OK(fsdp_shard_grad(u, (void**)&g, NULL));
  int bad = 0;
  for (int i = 0; i < 2; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    for (size_t e = 0; e < len; ++e) {
      const size_t k = (i == 0 ? 0 : N_A) + po + e;
      double sum = 0.0;
      for (int r = 0; r < W; ++r) sum += grad_value(r, k);
      if (g[so + e] != sum / W) ++bad;
    }
  }
  CHECK_MSG(bad == 0, label);

  /* Every element is held by exactly F/F = 1 rank per shard group: count coverage over the
   * world, which must be W/F copies of each element. */
  long held = 0, total = 0;
  for (int i = 0; i < 2; ++i) {
    size_t len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, NULL, NULL, &len));
    held += (long)len;
  }
  MPI_Allreduce(&held, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK_MSG(total == (long)(N_A + N_B) * (W / want_f), label);

  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_strategies");
  const int W = th_size();
  check_strategy(FSDP_FULL_SHARD, 0, W, "full shard, default F = W");
  check_strategy(FSDP_NO_SHARD, 0, 1, "no shard, F = 1");
  check_strategy(FSDP_HYBRID_SHARD, 0, th_ranks_per_node(),
                 "hybrid, default F = ranks per node (one node, or FSDP_RANKS_PER_NODE)");
  if (W % 2 == 0) check_strategy(FSDP_HYBRID_SHARD, 2, 2, "hybrid, F = 2");
  check_strategy(FSDP_HYBRID_SHARD, 1, 1, "hybrid, F = 1");
  return th_finish();
}
