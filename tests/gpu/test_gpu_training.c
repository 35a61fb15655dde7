/* Training on the GPU against the same training on the host, in one program: three units (float32;
 * bfloat16 compute reduced in bfloat16; bfloat16 compute reduced in float32), AdamW with clipping,
 * three steps. A CUDA context and a host context
 * get the same initial values and gradients. The host reference uses the transport the CUDA
 * context resolved to where that one's arithmetic is the host's (MPI staging runs the host's MPI
 * collectives in the same order): there unsharded parameters, gradient shards and updated shards
 * must agree bit for bit, as on one rank (no sum). NCCL orders and rounds its sums its own way (a
 * bfloat16 reduction rounds the sum to bfloat16 before the division), so with NCCL on >= 2 ranks
 * each reduced element is held to the error bound of a W-term sum in the reduce dtype,
 * (W u_reduce + u_float32) * sum_r |g_r| / W, computed here from every rank's gradient, and the
 * parameters to what AdamW can make of such gradients: at most 2 lr per step (|update| <= lr).
 * The CUDA context's checkpoint is loaded by a host context and compared bit for bit, a host
 * context's checkpoint of a unit with several parameters by a CUDA context, and its
 * steady-state steps must not call cudaMalloc.
 *
 * Argument: auto | mpi | nccl | offload | async | hybrid | hfsdp: the CUDA context's transport,
 * CPU offload, the asynchronous calls with prefetch on (the progress thread's path), hybrid
 * sharding (factor 2: run on 4 ranks; both contexts use it), or hybrid with HFSDP (both contexts;
 * the gradient shards, then 1/(F*N) and not the caller's to read, are compared through the norms
 * and the updated parameters; the bfloat16 units' float32 masters are split across replicas).
 * Masters are compared through fsdp_gather_params.
 * Exit 77 (skipped) when a rank sees no CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_reason.h"
#include "harness.h"
#include "precision_ref.h"
#include "sum_bound.h"

enum { NU = 3, N0 = 1000, N1 = 333, N2 = 517, STEPS = 3 };
static const int NUMEL[NU] = {N0, N1, N2};
static const int BF16[NU] = {0, 1, 1};        /* the unit computes in bfloat16 */
static const int REDUCE_BF16[NU] = {0, 1, 0}; /* and reduces in bfloat16 (unit 2: in float32) */
static int async_calls = 0;                   /* mode async */

typedef struct {
  fsdp_context_t ctx;
  fsdp_unit_t u[NU];
  fsdp_optimizer_t opt;
} model_t;

static void fill(float* x, int n, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) x[i] = (float)th_uniform(&s);
}

static const double LR = 1e-2;

static void make_model(model_t* m, const fsdp_config_t* cfg) {
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, cfg, &m->ctx));
  static const int64_t s0[1] = {N0}, s1[2] = {37, 9}, s2[1] = {N2};
  fsdp_param_desc_t d[NU] = {{"a.w", 1, s0, FSDP_FLOAT32, 1},
                             {"b.w", 2, s1, FSDP_FLOAT32, 1},
                             {"c.w", 1, s2, FSDP_FLOAT32, 1}};
  static float v[NU][N0];
  for (int k = 0; k < NU; ++k) {
    fill(v[k], NUMEL[k], 11 + (uint64_t)k);
    const void* p[1] = {v[k]};
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    if (BF16[k]) o.param_dtype = FSDP_BFLOAT16;
    if (BF16[k] && !REDUCE_BF16[k]) o.reduce_dtype = FSDP_FLOAT32;
    CHECK_OK(fsdp_unit_create_ex(m->ctx, 1, &d[k], p, &o, &m->u[k]));
  }
  fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  h.lr = LR;
  CHECK_OK(fsdp_optimizer_create(m->ctx, FSDP_OPTIMIZER_ADAMW, &h, NU, m->u, &m->opt));
  if (async_calls) CHECK_OK(fsdp_set_prefetch(m->ctx, 1, 1));
}

static void free_model(model_t* m) {
  CHECK_OK(fsdp_optimizer_destroy(&m->opt));
  CHECK_OK(fsdp_finalize(&m->ctx));
}

/* Bytes the library holds (device or host) into `out`, through the CUDA runtime. */
static void fetch(void* out, const void* p, size_t bytes) {
  CHECK(cudaMemcpy(out, p, bytes, cudaMemcpyDefault) == cudaSuccess);
}

/* Unit k's float32 masters (fsdp_gather_params: with HFSDP's split masters no rank holds a
 * float32 shard), into a new host array. */
static float* masters(fsdp_unit_t u, int k) {
  float* m = malloc((size_t)NUMEL[k] * sizeof(float));
  void* out[1] = {m};
  CHECK_OK(fsdp_gather_params(u, out));
  return m;
}

/* Elements equal bit for bit, or (tol != NULL) within tol[i] (a scalar tolerance when bound). */
static int same_or_close(const float* a, const float* b, size_t n, const double* tol,
                         double bound) {
  for (size_t i = 0; i < n; ++i) {
    if (!tol && bound < 0 ? memcmp(&a[i], &b[i], sizeof(float)) != 0
                          : fabs((double)a[i] - (double)b[i]) > (tol ? tol[i] : bound))
      return 0;
  }
  return 1;
}

/* Unsharded parameters (float32 or bfloat16 bytes): bit for bit, or within `bound` plus the
 * bfloat16 rounding of the larger value. */
static int params_close(const void* a, const void* b, size_t n, int bf16, double bound) {
  if (bound < 0) return memcmp(a, b, n * (bf16 ? 2 : 4)) == 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = bf16 ? ref_decode(((const uint16_t*)a)[i], REF_BF16) : ((const float*)a)[i];
    const double y = bf16 ? ref_decode(((const uint16_t*)b)[i], REF_BF16) : ((const float*)b)[i];
    if (fabs(x - y) > bound + (bf16 ? fmax(fabs(x), fabs(y)) / 256.0 : 0.0)) return 0;
  }
  return 1;
}

/* The gradient rank r writes for unit k at `step`, as both contexts see it (bfloat16 units). */
typedef struct {
  int step, k;
} grad_id_t;

static void rank_gradient(float* g, int r, const void* arg) {
  const grad_id_t* id = arg;
  const int n = NUMEL[id->k];
  fill(g, n, 100 + (uint64_t)(id->step * 10 + id->k * 3 + r));
  if (BF16[id->k])
    for (int i = 0; i < n; ++i) {
      uint16_t b = 0;
      CHECK_OK(fsdp_convert(&b, FSDP_BFLOAT16, &g[i], FSDP_FLOAT32, 1));
      g[i] = (float)ref_decode(b, REF_BF16);
    }
}

/* One call on the host unit and the CUDA one: the synchronous form, or in async mode the
 * asynchronous one on both, then both waits. */
static void on_both(fsdp_unit_t h, fsdp_unit_t d, fsdp_status_t (*sync)(fsdp_unit_t),
                    fsdp_status_t (*async)(fsdp_unit_t, fsdp_request_t*)) {
  if (!async_calls) {
    CHECK_OK(sync(h));
    CHECK_OK(sync(d));
    return;
  }
  fsdp_request_t hr = NULL, dr = NULL;
  CHECK_OK(async(h, &hr));
  CHECK_OK(async(d, &dr));
  CHECK_OK(fsdp_wait(&hr));
  CHECK_OK(fsdp_wait(&dr));
}

/* A checkpoint of a unit with several parameters, saved by a host context, loaded into a CUDA
 * one: each parameter's float32 values land (the load fills device buffers through one host copy
 * of each, which every parameter of the unit writes into), bfloat16 compute so that HFSDP's split
 * masters are loaded too in mode hfsdp. */
static void load_into_device(const fsdp_config_t* gpu, const fsdp_config_t* host,
                             const char* mode) {
  enum { P = 3 };
  static const int64_t s0[1] = {100}, s1[2] = {7, 9}, s2[1] = {61};
  const fsdp_param_desc_t d[P] = {{"x.a", 1, s0, FSDP_FLOAT32, 1},
                                  {"x.b", 2, s1, FSDP_FLOAT32, 1},
                                  {"x.c", 1, s2, FSDP_FLOAT32, 1}};
  const int n[P] = {100, 63, 61};
  float* v[P];
  float* got[P];
  for (int p = 0; p < P; ++p) {
    v[p] = malloc((size_t)n[p] * sizeof(float));
    got[p] = malloc((size_t)n[p] * sizeof(float));
    fill(v[p], n[p], 500 + (uint64_t)p);
  }
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = FSDP_BFLOAT16;
  o.reduce_dtype = FSDP_FLOAT32;
  char path[256];
  snprintf(path, sizeof path, "test_gpu_training_load_%s_np%d.h5", mode, th_size());
  fsdp_context_t hc = NULL, dc = NULL;
  fsdp_unit_t hu = NULL, du = NULL;
  const fsdp_checkpoint_options_t copts = FSDP_CHECKPOINT_OPTIONS_INIT;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, host, &hc));
  CHECK_OK(fsdp_unit_create_ex(hc, P, d, (const void* const*)v, &o, &hu));
  CHECK_OK(fsdp_checkpoint_save(hc, path, &copts));
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, gpu, &dc));
  CHECK_OK(fsdp_unit_create_ex(dc, P, d, NULL, &o, &du));
  CHECK_OK(fsdp_checkpoint_load(dc, path, &copts, NULL));
  CHECK_OK(fsdp_gather_params(du, (void* const*)got));
  int bad = 0;
  for (int p = 0; p < P; ++p) bad += memcmp(got[p], v[p], (size_t)n[p] * sizeof(float)) != 0;
  CHECK_MSG(bad == 0, "a CUDA context's load lost parameters of a unit");
  CHECK_OK(fsdp_finalize(&dc));
  CHECK_OK(fsdp_finalize(&hc));
  for (int p = 0; p < P; ++p) {
    free(v[p]);
    free(got[p]);
  }
  if (th_rank() == 0) remove(path);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_gpu_training");
  const char* mode = argc > 1 ? argv[1] : "auto";
  int count = 0;
  gpu_print_runtime_error();
  if (th_skip_without_gpu(!strcmp(mode, "nccl"), &count)) return 77;
  fsdp_config_t gpu = FSDP_CONFIG_INIT;
  gpu.memory_space = FSDP_MEMORY_CUDA;
  if (!strcmp(mode, "mpi")) gpu.transport = FSDP_TRANSPORT_MPI;
  if (!strcmp(mode, "nccl")) gpu.transport = FSDP_TRANSPORT_NCCL;
  if (!strcmp(mode, "offload")) gpu.cpu_offload = 1;
  async_calls = !strcmp(mode, "async");
  const int hfsdp = !strcmp(mode, "hfsdp");
  const int hybrid = hfsdp || !strcmp(mode, "hybrid");
  if (hybrid) {
    if (th_size() % 2 != 0) {
      if (th_rank() == 0) printf("skipped: hybrid sharding (factor 2) needs an even rank count\n");
      MPI_Finalize();
      return 77;
    }
    gpu.strategy = FSDP_HYBRID_SHARD;
    gpu.sharding_factor = 2;
    gpu.hfsdp = hfsdp;
  }

  model_t host, dev;
  make_model(&dev, &gpu);
  fsdp_transport_t transport = FSDP_TRANSPORT_AUTO;
  fsdp_memory_space_t space = FSDP_MEMORY_HOST;
  int device = -1;
  CHECK_OK(fsdp_context_placement(dev.ctx, &space, &device, NULL, &transport));
  CHECK(space == FSDP_MEMORY_CUDA && device >= 0 && device < count);
  /* The reference sums as the CUDA context does where it can: MPI staging runs the host's MPI
   * transport. Bit for bit there and on one rank; NCCL's sums are held to their error bound. */
  fsdp_config_t ref = FSDP_CONFIG_INIT;
  if (transport == FSDP_TRANSPORT_MPI) ref.transport = FSDP_TRANSPORT_MPI;
  ref.strategy = gpu.strategy;
  ref.sharding_factor = gpu.sharding_factor;
  ref.hfsdp = gpu.hfsdp;
  make_model(&host, &ref);
  const int exact = transport == FSDP_TRANSPORT_MPI || th_size() == 1;
  const double* const exact_tol = NULL;
  int srank = 0;
  CHECK_OK(fsdp_group_info(dev.ctx, FSDP_GROUP_SHARD, &srank, NULL));

  /* The stream on the context's device, created after making that device current. */
  CHECK(cudaSetDevice(device) == cudaSuccess);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  if (count > 1) { /* a stream of another device is refused by name, nothing changed */
    cudaStream_t other;
    CHECK(cudaSetDevice((device + 1) % count) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaSetDevice(device) == cudaSuccess);
    CHECK_FAILS(fsdp_set_stream(dev.ctx, other), FSDP_ERR_INVALID_ARGUMENT, "stream");
    cudaStreamDestroy(other);
  }
  CHECK_OK(fsdp_set_stream(dev.ctx, stream));
  /* AdamW moves an element by at most about lr per step: the parameters' bound after `step`. */
  double param_bound = exact ? -1.0 : 0.0;

  uint64_t after_warmup = 0;
  for (int step = 0; step < STEPS; ++step) {
    if (async_calls) { /* an order for prefetch to follow (recorded at step 0) */
      CHECK_OK(fsdp_begin_forward(host.ctx));
      CHECK_OK(fsdp_begin_forward(dev.ctx));
    }
    for (int k = 0; k < NU; ++k) {
      const int n = NUMEL[k];
      const size_t pbytes = (size_t)n * (BF16[k] ? 2 : 4);
      /* async: the progress thread's all-gather, maybe claimed from a prefetch */
      on_both(host.u[k], dev.u[k], fsdp_unshard, fsdp_unshard_async);
      void *hp = NULL, *dp = NULL, *hg = NULL, *dg = NULL;
      CHECK_OK(fsdp_param_data(host.u[k], 0, &hp));
      CHECK_OK(fsdp_param_data(dev.u[k], 0, &dp));
      char* got = malloc(pbytes);
      CHECK(cudaMemcpyAsync(got, dp, pbytes, cudaMemcpyDefault, stream) == cudaSuccess);
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      CHECK_MSG(params_close(got, hp, (size_t)n, BF16[k], param_bound),
                "unsharded parameters differ from the host's");
      free(got);
      /* The same gradient on both (rank- and step-dependent), written on the caller's stream. */
      float* g = malloc((size_t)n * sizeof(float));
      fill(g, n, 100 + (uint64_t)(step * 10 + k * 3 + th_rank()));
      CHECK_OK(fsdp_grad_data(host.u[k], 0, &hg));
      CHECK_OK(fsdp_grad_data(dev.u[k], 0, &dg));
      if (!BF16[k]) {
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
      on_both(host.u[k], dev.u[k], fsdp_reduce_grads, fsdp_reduce_grads_async);
      if (hfsdp) continue;
      size_t sn = 0;
      void *hs = NULL, *ds = NULL;
      CHECK_OK(fsdp_shard_grad(host.u[k], &hs, &sn));
      CHECK_OK(fsdp_shard_grad(dev.u[k], &ds, NULL));
      float* shard = malloc(sn * sizeof(float) + 1);
      double* tol = malloc(sn * sizeof(double) + 1);
      const grad_id_t id = {step, k};
      sum_bounds(tol, sn, (size_t)srank * sn, n, th_size(),
                 REDUCE_BF16[k] ? SUM_BOUND_U_BFLOAT16 : SUM_BOUND_U_FLOAT32, rank_gradient, &id);
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      fetch(shard, ds, sn * sizeof(float));
      CHECK_MSG(same_or_close(hs, shard, sn, exact ? exact_tol : tol, -1.0),
                "gradient shards differ from the host's");
      free(tol);
      free(shard);
    }
    double hn = 0, dn = 0;
    /* A bound never reached: the norms are compared, the updates stay comparable bit for bit. */
    CHECK_OK(fsdp_clip_grad_norm(host.ctx, 1e9, 2.0, &hn));
    CHECK_OK(fsdp_clip_grad_norm(dev.ctx, 1e9, 2.0, &dn));
    /* The norm's own sum order differs (one readback of per-unit partials): 1e-6 relative. */
    CHECK_MSG(fabs(hn - dn) <= (exact ? 1e-6 : 1e-2) * hn, "gradient norms differ");
    CHECK_OK(fsdp_optimizer_step(host.opt));
    CHECK_OK(fsdp_optimizer_step(dev.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(host.opt));
    CHECK_OK(fsdp_optimizer_zero_grad(dev.opt));
    if (step == 1) after_warmup = th_allocation_calls(dev.ctx);
    if (!exact) param_bound += 2.0 * LR;
  }
  CHECK_MSG(th_allocation_calls(dev.ctx) == after_warmup, "steady-state steps called cudaMalloc");

  /* The updated masters: equal wherever the gradients were equal. */
  for (int k = 0; k < NU; ++k) {
    float* hm = masters(host.u[k], k);
    float* dm = masters(dev.u[k], k);
    CHECK_MSG(same_or_close(hm, dm, (size_t)NUMEL[k], exact_tol, param_bound),
              "updated masters differ from the host's");
    free(hm);
    free(dm);
  }

  /* The GPU context's checkpoint, loaded by a host context: the same values as the GPU shards. */
  char path[256];
  snprintf(path, sizeof path, "test_gpu_training_%s_np%d.h5", mode, th_size());
  const fsdp_checkpoint_options_t copts = FSDP_CHECKPOINT_OPTIONS_INIT;
  CHECK_OK(fsdp_checkpoint_save(dev.ctx, path, &copts));
  model_t back;
  make_model(&back, &ref); /* the same strategy: the same shards */
  CHECK_OK(fsdp_checkpoint_load(back.ctx, path, &copts, NULL));
  for (int k = 0; k < NU; ++k) {
    float* bm = masters(back.u[k], k);
    float* dm = masters(dev.u[k], k);
    CHECK_MSG(same_or_close(bm, dm, (size_t)NUMEL[k], exact_tol, -1.0),
              "checkpoint of the GPU context differs");
    free(bm);
    free(dm);
  }
  free_model(&back);
  if (th_rank() == 0) remove(path);
  load_into_device(&gpu, &ref, mode);

  free_model(&dev);
  free_model(&host);
  cudaStreamDestroy(stream);
  return th_finish();
}
