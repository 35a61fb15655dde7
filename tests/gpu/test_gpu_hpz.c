/* hpZ (doc/hpz.md) with CUDA device memory at 4 ranks as 2 emulated nodes of 2
 * (FSDP_RANKS_PER_NODE=2): the same training with hpz on and off, bfloat16 compute reduced in
 * float32, AdamW, must end with bitwise the same shards and losses, and the secondary must be
 * 1/2 of each unit's unsharded bytes after a forward. Argument: mpi (the MPI staging transport)
 * or nccl (since 0.13: a communicator for the node group; needs a GPU per rank): the transport of
 * both runs, and of hpZ's node-local all-gather.
 * Exit 77 (skipped) when a rank sees no CUDA device, or the ranks are not 4 as 2 nodes of 2. */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_reason.h"
#include "harness.h"

enum { NU = 2, N = 300, STEPS = 3 };

typedef struct {
  double losses[STEPS];
  float shards[NU][N];
  size_t shard_numel, secondary_after_forward;
} Run;

/* The unit's parameter, from the device, as float32. */
static void read_param(fsdp_unit_t u, float* out) {
  void* p = NULL;
  uint16_t bf[N];
  CHECK_OK(fsdp_param_data(u, 0, &p));
  CHECK(cudaMemcpy(bf, p, sizeof bf, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK_OK(fsdp_convert(out, FSDP_FLOAT32, bf, FSDP_BFLOAT16, N));
}

static void write_grad(fsdp_unit_t u, const float* g) {
  void* p = NULL;
  uint16_t bf[N];
  CHECK_OK(fsdp_convert(bf, FSDP_BFLOAT16, g, FSDP_FLOAT32, N));
  CHECK_OK(fsdp_grad_data(u, 0, &p));
  CHECK(cudaMemcpy(p, bf, sizeof bf, cudaMemcpyHostToDevice) == cudaSuccess);
}

static float coef(int k, size_t e) {
  return 0.25f + (float)((e * 7 + (size_t)k * 3 + (size_t)th_rank()) % 11) / 16.0f;
}

static void train(int hpz, fsdp_transport_t transport, Run* r) {
  memset(r, 0, sizeof *r);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.memory_space = FSDP_MEMORY_CUDA;
  cfg.transport = transport;
  cfg.param_dtype = FSDP_BFLOAT16;
  cfg.reduce_dtype = FSDP_FLOAT32;
  cfg.hpz = hpz;
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  if (!ctx) return;
  static const int64_t shape[1] = {N};
  const fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  float init[N], w[N], g[N];
  fsdp_unit_t u[NU] = {NULL};
  for (int k = 0; k < NU; ++k) {
    for (size_t e = 0; e < N; ++e) init[e] = 0.5f + (float)((e * 13 + (size_t)k) % 17) / 8.0f;
    const void* values[1] = {init};
    CHECK_OK(fsdp_unit_create(ctx, 1, &d, values, &u[k]));
  }
  fsdp_hyperparams_t hp = FSDP_ADAMW_DEFAULTS;
  hp.lr = 1e-2;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &hp, NU, u, &opt));
  for (int step = 0; step < STEPS; ++step) {
    for (int k = 0; k < NU; ++k) { /* forward */
      CHECK_OK(fsdp_unshard(u[k]));
      read_param(u[k], w);
      for (size_t e = 0; e < N; ++e) r->losses[step] += 0.5 * coef(k, e) * w[e] * w[e];
      CHECK_OK(fsdp_reshard(u[k]));
    }
    if (step == 0) {
      fsdp_memory_stats_t s;
      memset(&s, 0, sizeof s);
      s.size = sizeof s;
      CHECK_OK(fsdp_memory_stats(ctx, &s));
      r->secondary_after_forward = s.secondary_bytes;
    }
    for (int k = NU - 1; k >= 0; --k) { /* backward */
      CHECK_OK(fsdp_unshard(u[k]));
      read_param(u[k], w);
      for (size_t e = 0; e < N; ++e) g[e] = coef(k, e) * w[e];
      write_grad(u[k], g);
      CHECK_OK(fsdp_reshard(u[k]));
      CHECK_OK(fsdp_reduce_grads(u[k]));
    }
    CHECK_OK(fsdp_optimizer_step(opt));
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
  }
  for (int k = 0; k < NU; ++k) {
    void* s = NULL;
    CHECK_OK(fsdp_shard_data(u[k], &s, &r->shard_numel));
    if (s && r->shard_numel <= N)
      CHECK(cudaMemcpy(r->shards[k], s, r->shard_numel * sizeof(float), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
  }
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_gpu_hpz");
  const char* mode = argc > 1 ? argv[1] : "mpi";
  const int nccl = !strcmp(mode, "nccl");
  int count = 0;
  gpu_print_runtime_error();
  if (th_skip_without_gpu(nccl, &count)) return 77;
  if (th_size() != 4 || th_ranks_per_node() != 2) {
    if (th_rank() == 0) printf("skipped: needs 4 ranks as 2 nodes of 2 (FSDP_RANKS_PER_NODE=2)\n");
    MPI_Finalize();
    return 77;
  }
  unsetenv("FSDP_TRANSPORT"); /* it would override cfg.transport */
  const fsdp_transport_t transport = nccl ? FSDP_TRANSPORT_NCCL : FSDP_TRANSPORT_MPI;
  static Run off, on;
  train(0, transport, &off);
  train(1, transport, &on);
  CHECK(memcmp(off.losses, on.losses, sizeof off.losses) == 0);
  CHECK(off.shard_numel == on.shard_numel && memcmp(off.shards, on.shards, sizeof on.shards) == 0);
  /* Each unit: N rounded to 4 blocks of a multiple of 8, in bfloat16; half of it per rank. */
  const size_t block = ((N + 3) / 4 + 7) / 8 * 8;
  CHECK(on.secondary_after_forward == NU * block * 4 * 2 / 2);
  CHECK(off.secondary_after_forward == 0);
  return th_finish();
}
