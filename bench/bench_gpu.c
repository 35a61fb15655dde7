/* GPU benchmark (issue targets in brackets), every figure the median of REPS timed repetitions
 * after WARMUP, each ratio measured side by side in the same run:
 *   unshard       vs ncclAllGather of the same bytes into a flat buffer      [ratio <= 1.05]
 *   reduce_grads  vs the same work done raw: zeroing the full gradient (the library zeroes it when
 *                 fsdp_grad_data hands it out), ncclReduceScatter out of place, and a copy of the
 *                 result into the shard (the epilogue's bytes: read the sum, write the shard)
 *                                                                             [ratio <= 1.05]
 *   (both only with >= 2 ranks: on one rank NCCL moves nothing and the rows would time local
 *   copies; one JSON line says so instead)
 *   the float32 -> bfloat16 cast of an unshard and the AdamW step, as a fraction of the device's
 *   memory bandwidth, itself measured as a device-to-device cudaMemcpy        [>= 0.8]
 *   cudaMalloc calls per steady-state training step                           [0]
 * Timed with CUDA events on the caller's stream (time_median). One rank per GPU (NCCL refuses two
 * ranks on one device). Prints JSON lines; exits 77 without a device.
 *
 *   mpiexec -n <GPUs> build/bench/bench_gpu [max MiB, default 256]   */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { WARMUP = 3, REPS = 10 };

#define CUDA_TRY(call)                                            \
  do {                                                            \
    cudaError_t e_ = (call);                                      \
    if (e_ != cudaSuccess) {                                      \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                               \
    }                                                             \
  } while (0)

static int rank_, size_;
static cudaStream_t stream_; /* the caller's stream (fsdp_set_stream) and the raw baselines' */

/* Median seconds of fn(arg) over REPS after WARMUP, the device idle and ranks aligned first, timed
 * by CUDA events on the caller's stream: the library orders its work after that stream and, at
 * the call that hands memory out (fsdp_param_data, fsdp_shard_grad, fsdp_shard_data), that stream
 * after the unit's work, so the events bracket the library's GPU work as they bracket the raw
 * baseline's (CPU time in between counts only while the GPU waits for it). The slowest rank's. */
static double time_median(void (*fn)(void*), void* arg) {
  double t[REPS];
  cudaEvent_t start, stop;
  CUDA_TRY(cudaEventCreate(&start));
  CUDA_TRY(cudaEventCreate(&stop));
  for (int i = 0; i < WARMUP + REPS; ++i) {
    CUDA_TRY(cudaDeviceSynchronize());
    MPI_Barrier(MPI_COMM_WORLD);
    CUDA_TRY(cudaEventRecord(start, stream_));
    fn(arg);
    CUDA_TRY(cudaEventRecord(stop, stream_));
    CUDA_TRY(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
    double dt = ms / 1e3, slowest = 0;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= WARMUP) t[i - WARMUP] = slowest;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(t, REPS);
}

typedef struct {
  fsdp_unit_t unit;
  fsdp_optimizer_t opt;
  ncclComm_t comm;
  void *full, *shard;
  size_t count; /* elements per rank */
  void* tmp;    /* the raw reduce-scatter's out-of-place result */
  void* src;
  void* dst;
  size_t bytes;
} op_t;

static void lib_unshard(void* a) {
  op_t* o = a;
  TRY(fsdp_unshard(o->unit));
  void* p = NULL;
  TRY(fsdp_param_data(o->unit, 0, &p)); /* orders the caller's stream after it */
  TRY(fsdp_reshard(o->unit));
}
static void raw_all_gather(void* a) {
  op_t* o = a;
  ncclAllGather(o->shard, o->full, o->count, ncclFloat32, o->comm, stream_);
}
static void lib_reduce(void* a) {
  op_t* o = a;
  void* g = NULL;
  TRY(fsdp_grad_data(o->unit, 0, &g));
  TRY(fsdp_reduce_grads(o->unit));
  void* s = NULL;
  TRY(fsdp_shard_grad(o->unit, &s, NULL)); /* orders the caller's stream after the reduction */
}
static void raw_reduce_scatter(void* a) {
  op_t* o = a;
  ncclReduceScatter(o->full, o->shard, o->count, ncclFloat32, ncclSum, o->comm, stream_);
}
static void raw_reduce_same_work(void* a) {
  op_t* o = a;
  CUDA_TRY(cudaMemsetAsync(o->full, 0, o->count * (size_t)size_ * 4, stream_));
  ncclReduceScatter(o->full, o->tmp, o->count, ncclFloat32, ncclSum, o->comm, stream_);
  CUDA_TRY(cudaMemcpyAsync(o->shard, o->tmp, o->count * 4, cudaMemcpyDeviceToDevice, stream_));
}
static void d2d_copy(void* a) {
  op_t* o = a;
  CUDA_TRY(cudaMemcpyAsync(o->dst, o->src, o->bytes, cudaMemcpyDeviceToDevice, stream_));
}
static void lib_adamw(void* a) {
  op_t* o = a;
  TRY(fsdp_optimizer_step(o->opt));
  void* s = NULL;
  TRY(fsdp_shard_data(o->unit, &s, NULL)); /* orders the caller's stream after the update */
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, size_t numel, fsdp_dtype_t param_dtype) {
  const int64_t shape[1] = {(int64_t)numel};
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_options_t uo = FSDP_UNIT_OPTIONS_INIT;
  uo.param_dtype = param_dtype;
  fsdp_unit_t u = NULL;
  TRY(fsdp_unit_create_ex(ctx, 1, &d, NULL, &uo, &u));
  return u;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  const size_t max_mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
  int count = 0, none = 0, any = 0;
  TRY(fsdp_cuda_device_count(&count));
  none = count < 1;
  MPI_Allreduce(&none, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (rank_ == 0) printf("skipped: no CUDA device\n");
    MPI_Finalize();
    return 77;
  }
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.memory_space = FSDP_MEMORY_CUDA;
  cfg.transport = FSDP_TRANSPORT_NCCL;
  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  int device = 0;
  TRY(fsdp_context_placement(ctx, NULL, &device, NULL, NULL));
  CUDA_TRY(cudaSetDevice(device));
  CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TRY(fsdp_set_stream(ctx, stream_));
  struct cudaDeviceProp prop;
  CUDA_TRY(cudaGetDeviceProperties(&prop, device));

  /* The raw baseline's own communicator, made the same way as the library's. */
  ncclUniqueId id;
  if (rank_ == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, size_, id, rank_) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  if (rank_ == 0)
    printf("{\"device\": \"%s\", \"ranks\": %d, \"warmup\": %d, \"reps\": %d}\n", prop.name, size_,
           WARMUP, REPS);

  if (size_ < 2 && rank_ == 0)
    printf(
        "{\"nccl\": \"not measured: needs >= 2 ranks on >= 2 GPUs (one rank moves nothing)\"}\n");
  for (size_t mib = 1; size_ >= 2 && mib <= max_mib; mib *= 4) {
    const size_t total = mib << 20, numel = total / 4, per_rank = numel / (size_t)size_;
    op_t o;
    memset(&o, 0, sizeof o);
    o.comm = comm;
    o.count = per_rank;
    CUDA_TRY(cudaMalloc(&o.full, per_rank * (size_t)size_ * 4));
    CUDA_TRY(cudaMalloc(&o.shard, per_rank * 4));
    CUDA_TRY(cudaMalloc(&o.tmp, per_rank * 4));
    o.unit = make_unit(ctx, per_rank * (size_t)size_, FSDP_FLOAT32);
    const double lib_ag = time_median(lib_unshard, &o), raw_ag = time_median(raw_all_gather, &o);
    const double lib_rs = time_median(lib_reduce, &o), raw_rs = time_median(raw_reduce_scatter, &o);
    const double raw_same = time_median(raw_reduce_same_work, &o);
    if (rank_ == 0)
      printf(
          "{\"MiB\": %zu, \"unshard_s\": %.6g, \"ncclAllGather_s\": %.6g, \"ratio\": %.3f, "
          "\"reduce_grads_s\": %.6g, \"ncclReduceScatter_s\": %.6g, \"raw_same_work_s\": %.6g, "
          "\"ratio_rs\": %.3f, \"ratio_rs_bare\": %.3f}\n",
          mib, lib_ag, raw_ag, lib_ag / raw_ag, lib_rs, raw_rs, raw_same, lib_rs / raw_same,
          lib_rs / raw_rs);
    TRY(fsdp_unit_destroy(&o.unit));
    cudaFree(o.full);
    cudaFree(o.shard);
    cudaFree(o.tmp);
  }

  /* Kernels on one GPU's shard: bandwidth against a device-to-device copy of the same bytes. */
  const size_t numel = (max_mib << 20) / 4 / (size_t)size_ * (size_t)size_;
  op_t o;
  memset(&o, 0, sizeof o);
  o.bytes = numel * 4;
  CUDA_TRY(cudaMalloc(&o.src, o.bytes));
  CUDA_TRY(cudaMalloc(&o.dst, o.bytes));
  const double copy_s = time_median(d2d_copy, &o);
  const double copy_bw = 2.0 * (double)o.bytes / copy_s; /* read + write */
  o.unit = make_unit(ctx, numel, FSDP_BFLOAT16);
  /* A one-rank shard group would make the unshard a pure cast; with W ranks the cast covers the
   * shard and the all-gather the rest: time the cast alone through a 1-rank context's unshard. */
  double cast_fraction = 0, adam_fraction = 0;
  {
    fsdp_context_t solo = NULL;
    MPI_Comm self_comm;
    MPI_Comm_dup(MPI_COMM_SELF, &self_comm);
    TRY(fsdp_init(self_comm, &cfg, &solo));
    TRY(fsdp_set_stream(solo, stream_));
    op_t s;
    memset(&s, 0, sizeof s);
    s.unit = make_unit(solo, numel, FSDP_BFLOAT16);
    const double cast_s = time_median(lib_unshard, &s);
    cast_fraction = (double)numel * 6.0 / cast_s / copy_bw; /* 4 bytes read, 2 written */
    const fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
    TRY(fsdp_optimizer_create(solo, FSDP_OPTIMIZER_ADAMW, &h, 1, &s.unit, &s.opt));
    void* g = NULL;
    TRY(fsdp_unshard(s.unit));
    TRY(fsdp_grad_data(s.unit, 0, &g));
    TRY(fsdp_reshard(s.unit));
    TRY(fsdp_reduce_grads(s.unit));
    const double adam_s = time_median(lib_adamw, &s);
    adam_fraction = (double)numel * 28.0 / adam_s / copy_bw; /* p, g, m, v read; p, m, v written */

    /* cudaMalloc calls per steady-state step: unshard, gradient, reduce, step. */
    fsdp_memory_stats_t m;
    memset(&m, 0, sizeof m);
    m.size = sizeof m;
    TRY(fsdp_memory_stats(solo, &m));
    const size_t before = m.allocation_calls;
    for (int step = 0; step < 10; ++step) {
      TRY(fsdp_unshard(s.unit));
      TRY(fsdp_grad_data(s.unit, 0, &g));
      TRY(fsdp_reshard(s.unit));
      TRY(fsdp_reduce_grads(s.unit));
      TRY(fsdp_optimizer_step(s.opt));
    }
    TRY(fsdp_memory_stats(solo, &m));
    if (rank_ == 0)
      printf("{\"cudaMalloc_per_step\": %.2f}\n", (double)(m.allocation_calls - before) / 10.0);
    TRY(fsdp_optimizer_destroy(&s.opt));
    TRY(fsdp_finalize(&solo));
    MPI_Comm_free(&self_comm);
  }
  if (rank_ == 0)
    printf(
        "{\"copy_GBps\": %.1f, \"cast_fraction_of_copy_bw\": %.3f, "
        "\"adamw_fraction_of_copy_bw\": %.3f, \"elements\": %zu}\n",
        copy_bw / 1e9, cast_fraction, adam_fraction, numel);
  TRY(fsdp_unit_destroy(&o.unit));
  cudaFree(o.src);
  cudaFree(o.dst);
  ncclCommDestroy(comm);
  TRY(fsdp_finalize(&ctx));
  cudaStreamDestroy(stream_);
  MPI_Finalize();
  return 0;
}
