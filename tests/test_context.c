/* Contexts: every way to create one (C and Fortran communicator handles, NULL config, a config
 * from an older and shorter header, a sub-communicator), versions, and the memory accounting,
 * checked against sizes computed here. */
#include <stddef.h>
#include <string.h>

#include "harness.h"

static void check_defaults(fsdp_context_t ctx, int world) {
  int f = 0, size = 0;
  fsdp_sharding_strategy_t s = FSDP_NO_SHARD;
  fsdp_grad_reduction_t red = FSDP_REDUCE_SUM;
  CHECK_OK(fsdp_context_config(ctx, &f, &s, &red));
  CHECK(f == world && s == FSDP_FULL_SHARD && red == FSDP_REDUCE_MEAN);
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_WORLD, NULL, &size));
  CHECK(size == world);
}

static void check_memory_accounting(fsdp_context_t ctx) {
  int F = 0;
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));
  const int64_t shape[2] = {33, 7};
  /* One shard: ceil(numel / F) rounded up to a multiple of 8 elements (fsdp.h). */
  const size_t numel = 33 * 7, shard_n = ((numel + (size_t)F - 1) / (size_t)F + 7) / 8 * 8;
  const size_t shard_b = shard_n * sizeof(float), padded_b = shard_n * (size_t)F * sizeof(float);
  fsdp_param_desc_t d = {"w", 2, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, NULL, &u));

  fsdp_memory_stats_t m;
  memset(&m, 0xff, sizeof m);
  m.size = sizeof m;
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.shard_bytes == shard_b && m.grad_shard_bytes == 0 && m.unsharded_bytes == 0);
  CHECK(m.unsharded_model_bytes == numel * sizeof(float));

  /* With the shared-memory transport the node's ranks share one buffer, each charged its part,
   * and it stays in the node's slots rather than in the pool. */
  /* With zero-copy storage the unsharded copy is the shards themselves: nothing more is held. */
  const int zero_copy = th_zero_copy(ctx);
  int unit_zero_copy = -1;
  CHECK_OK(fsdp_unit_zero_copy(u, &unit_zero_copy));
  CHECK(unit_zero_copy == zero_copy);
  CHECK_FAILS(fsdp_unit_zero_copy(u, NULL), FSDP_ERR_INVALID_ARGUMENT, "zero_copy");
  const size_t sharers = th_unsharded_sharers(ctx);
  const size_t unsharded_b = zero_copy ? 0 : padded_b / sharers;
  const size_t cached_b = th_unsharded_pooled(ctx) ? padded_b : 0;
  CHECK_OK(fsdp_unshard(u));
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.unsharded_bytes == unsharded_b);
  CHECK_OK(fsdp_reshard(u));
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.unsharded_bytes == 0 && m.pool_cached_bytes == cached_b);
  const size_t peak = m.peak_bytes;
  CHECK(peak == shard_b + unsharded_b);

  /* Steady state allocates nothing new: the pool hands the same buffer back. */
  for (int i = 0; i < 5; ++i) {
    CHECK_OK(fsdp_unshard(u));
    CHECK_OK(fsdp_reshard(u));
  }
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.peak_bytes == peak && m.pool_cached_bytes == cached_b);

  void* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, &g));
  CHECK_OK(fsdp_reduce_grads(u));
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.grad_shard_bytes == shard_b && m.unsharded_bytes == 0);
  /* Scratch for the reduction: at most one shard (it is 0 with one rank: nothing moves); with a
   * shard group over several nodes (shared memory), also the node's partial sums of one block per
   * node. */
  const size_t nodes_spanned = (size_t)F / sharers;
  CHECK(m.scratch_bytes <= shard_b * (nodes_spanned > 1 ? 1 + nodes_spanned : 1));

  CHECK_OK(fsdp_trim_pool(ctx));
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.pool_cached_bytes == 0 && m.scratch_bytes == 0);

  /* A caller compiled against a header whose struct ended before peak_bytes gets only what fits. */
  fsdp_memory_stats_t old;
  memset(&old, 0xab, sizeof old);
  old.size = offsetof(fsdp_memory_stats_t, peak_bytes);
  CHECK_OK(fsdp_memory_stats(ctx, &old));
  CHECK(old.shard_bytes == shard_b);
  unsigned char sentinel[sizeof old.peak_bytes];
  memset(sentinel, 0xab, sizeof sentinel);
  CHECK(memcmp(&old.peak_bytes, sentinel, sizeof sentinel) == 0);

  CHECK_OK(fsdp_unit_destroy(&u));
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK(m.shard_bytes == 0 && m.grad_shard_bytes == 0 && m.unsharded_model_bytes == 0);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_context");
  const int W = th_size(), rank = th_rank();

  int major = -1, minor = -1, patch = -1;
  CHECK_OK(fsdp_get_version(&major, &minor, &patch));
  CHECK(major == FSDP_VERSION_MAJOR && minor == FSDP_VERSION_MINOR && patch == FSDP_VERSION_PATCH);
  CHECK_OK(FSDP_CHECK_VERSION());

  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  check_defaults(ctx, W);
  check_memory_accounting(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
  CHECK(ctx == NULL);

  /* The Fortran/FFI entry point. */
  CHECK_OK(fsdp_init_fcomm((int)MPI_Comm_c2f(MPI_COMM_WORLD), NULL, &ctx));
  check_defaults(ctx, W);
  CHECK_OK(fsdp_finalize(&ctx));

  /* fsdp_config_defaults fills what FSDP_CONFIG_INIT gives. */
  fsdp_config_t a = FSDP_CONFIG_INIT, b;
  memset(&b, 0x5a, sizeof b);
  CHECK_OK(fsdp_config_defaults(&b, sizeof b));
  CHECK(a.size == b.size && a.magic == b.magic && a.version == b.version &&
        a.strategy == b.strategy && a.sharding_factor == b.sharding_factor &&
        a.grad_reduction == b.grad_reduction);

  /* A config from an older, shorter header: fields past `size` are ignored and defaulted. */
  fsdp_config_t older = FSDP_CONFIG_INIT;
  older.size = offsetof(fsdp_config_t, sharding_factor);
  older.strategy = FSDP_NO_SHARD;
  older.sharding_factor = 12345; /* beyond size: must not be read */
  older.grad_reduction = (fsdp_grad_reduction_t)99;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &older, &ctx));
  int f = 0;
  fsdp_grad_reduction_t red = FSDP_REDUCE_SUM;
  CHECK_OK(fsdp_context_config(ctx, &f, NULL, &red));
  CHECK(f == 1 && red == FSDP_REDUCE_MEAN);
  CHECK_OK(fsdp_finalize(&ctx));

  /* A context over a sub-communicator, and two contexts alive at once. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  int half_size = 0;
  MPI_Comm_size(half, &half_size);
  fsdp_context_t sub = NULL;
  CHECK_OK(fsdp_init(half, NULL, &sub));
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  check_defaults(sub, half_size);
  check_defaults(ctx, W);
  check_memory_accounting(sub);
  check_memory_accounting(ctx);
  CHECK_OK(fsdp_finalize(&sub));
  CHECK_OK(fsdp_finalize(&ctx));
  MPI_Comm_free(&half);
  return th_finish();
}
