/* Training on the GPU against the same training on the host, in one program: two units (float32,
 * one with bfloat16 compute), AdamW with clipping, three steps. A CUDA context and a host context
 * get the same initial values and gradients; unsharded parameters, gradient shards and updated
 * shards must agree bit for bit (the kernels share the host's element arithmetic and the MPI
 * staging path runs the host's collectives; NCCL sums may round differently from 3 ranks on, so
 * there the gradients are compared to 1e-6 relative). The CUDA context's checkpoint is loaded by a
 * host context and compared bit for bit, and its steady-state steps must not call cudaMalloc.
 *
 * Argument: auto | mpi | nccl | offload (the CUDA context's transport or CPU offload).
 * Exit 77 (skipped) when a rank sees no CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { N0 = 1000, N1 = 333, STEPS = 3 };

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t u[2];
  fsdp_optimizer_t opt;
} model_t;

static void fill(float* x, int n, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) x[i] = (float)th_uniform(&s);
}

static void make_model(model_t* m, const fsdp_config_t* cfg) {
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, cfg, &m->ctx));
  static const int64_t s0[1] = {N0}, s1[2] = {37, 9};
  fsdp_param_desc_t d0 = {"a.w", 1, s0, FSDP_FLOAT32, 1}, d1 = {"b.w", 2, s1, FSDP_FLOAT32, 1};
  static float v0[N0], v1[N1];
  fill(v0, N0, 11);
  fill(v1, N1, 12);
  const void* p0[1] = {v0};
  const void* p1[1] = {v1};
  CHECK_OK(fsdp_unit_create(m->ctx, 1, &d0, p0, &m->u[0]));
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = FSDP_BFLOAT16;
  CHECK_OK(fsdp_unit_create_ex(m->ctx, 1, &d1, p1, &o, &m->u[1]));
  fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  h.lr = 1e-2;
  CHECK_OK(fsdp_optimizer_create(m->ctx, FSDP_OPTIMIZER_ADAMW, &h, 2, m->u, &m->opt));
}

static void free_model(model_t* m) {
  CHECK_OK(fsdp_optimizer_destroy(&m->opt));
  CHECK_OK(fsdp_finalize(&m->ctx));
}

/* Bytes the library holds (device or host) into `out`, through the CUDA runtime. */
static void fetch(void* out, const void* p, size_t bytes) {
  CHECK(cudaMemcpy(out, p, bytes, cudaMemcpyDefault) == cudaSuccess);
}

static int same_or_close(const float* a, const float* b, size_t n, int exact) {
  for (size_t i = 0; i < n; ++i) {
    if (exact ? memcmp(&a[i], &b[i], sizeof(float)) != 0
              : fabsf(a[i] - b[i]) > 1e-6f * (fabsf(a[i]) + 1e-6f))
      return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_gpu_training");
  const char* mode = argc > 1 ? argv[1] : "auto";
  int count = 0;
  if (th_skip_without_gpu(!strcmp(mode, "nccl"), &count)) return 77;
  fsdp_config_t gpu = FSDP_CONFIG_INIT;
  gpu.memory_space = FSDP_MEMORY_CUDA;
  if (!strcmp(mode, "mpi")) gpu.transport = FSDP_TRANSPORT_MPI;
  if (!strcmp(mode, "nccl")) gpu.transport = FSDP_TRANSPORT_NCCL;
  if (!strcmp(mode, "offload")) gpu.cpu_offload = 1;

  model_t host, dev;
  make_model(&host, NULL);
  make_model(&dev, &gpu);
  fsdp_transport_t transport = FSDP_TRANSPORT_AUTO;
  fsdp_memory_space_t space = FSDP_MEMORY_HOST;
  int device = -1;
  CHECK_OK(fsdp_context_placement(dev.ctx, &space, &device, NULL, &transport));
  CHECK(space == FSDP_MEMORY_CUDA && device >= 0 && device < count);
  /* Bit-for-bit gradients: MPI staging runs the host's collective; NCCL sums 2 ranks exactly. */
  const int exact_grads = transport == FSDP_TRANSPORT_MPI || th_size() <= 2;

  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  CHECK_OK(fsdp_set_stream(dev.ctx, stream));

  uint64_t after_warmup = 0;
  for (int step = 0; step < STEPS; ++step) {
    for (int k = 0; k < 2; ++k) {
      const int n = k == 0 ? N0 : N1;
      const size_t pbytes = (size_t)n * (k == 0 ? 4 : 2);
      CHECK_OK(fsdp_unshard(host.u[k]));
      CHECK_OK(fsdp_unshard(dev.u[k]));
      void *hp = NULL, *dp = NULL, *hg = NULL, *dg = NULL;
      CHECK_OK(fsdp_param_data(host.u[k], 0, &hp));
      CHECK_OK(fsdp_param_data(dev.u[k], 0, &dp));
      char* got = malloc(pbytes);
      CHECK(cudaMemcpyAsync(got, dp, pbytes, cudaMemcpyDefault, stream) == cudaSuccess);
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      if (exact_grads)
        CHECK_MSG(memcmp(got, hp, pbytes) == 0, "unsharded parameters differ from the host's");
      free(got);
      /* The same gradient on both (rank- and step-dependent), written on the caller's stream. */
      float* g = malloc((size_t)n * sizeof(float));
      fill(g, n, 100 + (uint64_t)(step * 10 + k * 3 + th_rank()));
      CHECK_OK(fsdp_grad_data(host.u[k], 0, &hg));
      CHECK_OK(fsdp_grad_data(dev.u[k], 0, &dg));
      if (k == 0) {
        memcpy(hg, g, (size_t)n * 4);
        CHECK(cudaMemcpyAsync(dg, g, (size_t)n * 4, cudaMemcpyHostToDevice, stream) == cudaSuccess);
      } else { /* bfloat16 gradients: the host's conversion, written on both */
        uint16_t* b = malloc((size_t)n * 2);
        CHECK_OK(fsdp_convert(b, FSDP_BFLOAT16, g, FSDP_FLOAT32, (size_t)n));
        memcpy(hg, b, (size_t)n * 2);
        CHECK(cudaMemcpyAsync(dg, b, (size_t)n * 2, cudaMemcpyHostToDevice, stream) == cudaSuccess);
        CHECK(cudaStreamSynchronize(stream) == cudaSuccess); /* before b is freed */
        free(b);
      }
      free(g);
      CHECK_OK(fsdp_reshard(host.u[k]));
      CHECK_OK(fsdp_reshard(dev.u[k]));
      CHECK_OK(fsdp_reduce_grads(host.u[k]));
      CHECK_OK(fsdp_reduce_grads(dev.u[k]));
      size_t sn = 0;
      void *hs = NULL, *ds = NULL;
      CHECK_OK(fsdp_shard_grad(host.u[k], &hs, &sn));
      CHECK_OK(fsdp_shard_grad(dev.u[k], &ds, NULL));
      float* shard = malloc(sn * sizeof(float) + 1);
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      fetch(shard, ds, sn * sizeof(float));
      CHECK_MSG(same_or_close(hs, shard, sn, exact_grads),
                "gradient shards differ from the host's");
      free(shard);
    }
    double hn = 0, dn = 0;
    /* A bound never reached: the norms are compared, the updates stay comparable bit for bit. */
    CHECK_OK(fsdp_clip_grad_norm(host.ctx, 1e9, 2.0, &hn));
    CHECK_OK(fsdp_clip_grad_norm(dev.ctx, 1e9, 2.0, &dn));
    CHECK_MSG(fabs(hn - dn) <= 1e-6 * hn, "gradient norms differ"); /* reduction order differs */
    CHECK_OK(fsdp_optimizer_step(host.opt));
    CHECK_OK(fsdp_optimizer_step(dev.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(host.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(dev.opt));
    if (step == 1) after_warmup = th_allocation_calls(dev.ctx);
  }
  CHECK_MSG(th_allocation_calls(dev.ctx) == after_warmup, "steady-state steps called cudaMalloc");

  /* The updated shards: equal wherever the gradients were equal. */
  for (int k = 0; k < 2; ++k) {
    void *hs = NULL, *ds = NULL;
    size_t sn = 0;
    CHECK_OK(fsdp_shard_data(host.u[k], &hs, &sn));
    CHECK_OK(fsdp_shard_data(dev.u[k], &ds, NULL));
    float* shard = malloc(sn * sizeof(float) + 1);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    fetch(shard, ds, sn * sizeof(float));
    CHECK_MSG(same_or_close(hs, shard, sn, exact_grads), "updated shards differ from the host's");
    free(shard);
  }

  /* The GPU context's checkpoint, loaded by a host context: the same values as the GPU shards. */
  char path[256];
  snprintf(path, sizeof path, "test_gpu_training_%s_np%d.h5", mode, th_size());
  const fsdp_checkpoint_options_t copts = FSDP_CHECKPOINT_OPTIONS_INIT;
  CHECK_OK(fsdp_checkpoint_save(dev.ctx, path, &copts));
  model_t back;
  make_model(&back, NULL);
  CHECK_OK(fsdp_checkpoint_load(back.ctx, path, &copts, NULL));
  for (int k = 0; k < 2; ++k) {
    void *bs = NULL, *ds = NULL;
    size_t sn = 0;
    CHECK_OK(fsdp_shard_data(back.u[k], &bs, &sn));
    CHECK_OK(fsdp_shard_data(dev.u[k], &ds, NULL));
    float* shard = malloc(sn * sizeof(float) + 1);
    fetch(shard, ds, sn * sizeof(float));
    CHECK_MSG(same_or_close(bs, shard, sn, 1), "checkpoint of the GPU context differs");
    free(shard);
  }
  free_model(&back);
  if (th_rank() == 0) remove(path);

  free_model(&dev);
  free_model(&host);
  cudaStreamDestroy(stream);
  return th_finish();
}
