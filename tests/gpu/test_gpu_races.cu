/* Stream ordering between the caller's stream and the library's, on a GPU: each case puts a spin
 * kernel (about 20 ms) on the caller's stream first, so that a missing event wait lets the
 * library's work and the caller's overlap, and the result is then wrong. Each case is compared
 * with values known on the host, exactly, and repeated so a race shows:
 *  - gradients written after fsdp_zero_grads, with the full gradient kept (no_sync): the memset
 *    must land before the caller's writes (issue 25, defect 1), or the reduced gradient is zero;
 *  - parameters read on the caller's stream right before fsdp_reshard: the next unit's all-gather
 *    reuses the pool buffer and must wait for that read;
 *  - the unsharded parameters of step 0 equal the initial values, bit for bit;
 *  - initial values written on the caller's stream by a kernel just before fsdp_unit_create are
 *    what the unit holds (defect 5);
 *  - the application's current device is the same after every call (defect 6).
 * Argument: auto | mpi | nccl. A rank with more than one GPU uses its last one (a device other
 * than 0). Exit 77 (skipped) when a rank sees no CUDA device, or NCCL has fewer GPUs than ranks. */
#include <cuda_runtime.h>
#include <mpi.h>  // C++ bindings outside the extern "C" block

#include <cstdio>
#include <cstring>
#include <vector>

#include "fsdp.h"
#include "gpu_reason.h"
extern "C" {
#include "harness.h"
}

namespace {

constexpr size_t kN = size_t(1) << 20;
constexpr int kRepeats = 8;

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void fill(float* x, size_t n, float value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = value + float(i % 1000);
}

__global__ void copy(float* dst, const float* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

long long spin_cycles() {
  int khz = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  return (long long)khz * 20;  // 20 ms
}

// Read on the caller's stream, which the library's calls order (a plain cudaMemcpy runs on the
// legacy stream, which does not wait for a non-blocking stream: it could race the all-gather).
bool equal_to_fill(cudaStream_t stream, const float* device_data, size_t n, float value) {
  std::vector<float> host(n);
  CHECK(cudaMemcpyAsync(host.data(), device_data, n * sizeof(float), cudaMemcpyDefault, stream) ==
        cudaSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  for (size_t i = 0; i < n; ++i)
    if (host[i] != value + float(i % 1000)) return false;
  return true;
}

struct Run {
  fsdp_context_t ctx = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;      // the application's current device
  int lib_device = 0;  // the context's
};

// The test's own kernels run on the context's device; the application's device comes back after.
struct OnDevice {
  explicit OnDevice(const Run& r) : run(r) { enter(); }
  ~OnDevice() { leave(); }
  void enter() { cudaSetDevice(run.lib_device); }
  void leave() { cudaSetDevice(run.device); }
  const Run& run;
};

fsdp_unit_t make_unit(Run& r, const char* name, float value) {
  static const int64_t shape[1] = {int64_t(kN)};
  fsdp_param_desc_t d = {name, 1, shape, FSDP_FLOAT32, 1};
  // The initial values, written by a kernel on the caller's stream just before the call.
  float* init = nullptr;
  int app = 0;
  cudaGetDevice(&app);
  cudaSetDevice(r.lib_device);  // the stream's and the array's device
  CHECK(cudaMalloc(&init, kN * sizeof(float)) == cudaSuccess);
  spin<<<1, 1, 0, r.stream>>>(spin_cycles());
  fill<<<256, 256, 0, r.stream>>>(init, kN, value);
  cudaSetDevice(app);
  const void* v[1] = {init};
  fsdp_unit_t u = nullptr;
  CHECK_OK(fsdp_unit_create(r.ctx, 1, &d, v, &u));
  cudaStreamSynchronize(r.stream);
  cudaFree(init);
  return u;
}

void check_device_kept(const Run& r, const char* after) {
  int now = -1;
  cudaGetDevice(&now);
  CHECK_MSG(now == r.device, after);
}

// Gradients written after fsdp_zero_grads while gradient sync is off.
void gradients_after_zero(Run& r, fsdp_unit_t u) {
  for (int rep = 0; rep < kRepeats; ++rep) {
    void* g = nullptr;
    CHECK_OK(fsdp_set_grad_sync(r.ctx, 0));
    CHECK_OK(fsdp_unshard(u));
    CHECK_OK(fsdp_grad_data(u, 0, &g));
    OnDevice on(r);
    fill<<<256, 256, 0, r.stream>>>(static_cast<float*>(g), kN, 100.0f);  // a stale micro-batch
    on.leave();
    CHECK_OK(fsdp_reduce_grads(u));  // kept: sync is off
    on.enter();
    spin<<<1, 1, 0, r.stream>>>(spin_cycles());
    on.leave();
    CHECK_OK(fsdp_zero_grads(u));
    CHECK_OK(fsdp_grad_data(u, 0, &g));
    on.enter();
    fill<<<256, 256, 0, r.stream>>>(static_cast<float*>(g), kN, 7.0f);
    on.leave();
    CHECK_OK(fsdp_set_grad_sync(r.ctx, 1));
    CHECK_OK(fsdp_reduce_grads(u));  // every rank wrote the same: the mean is exact
    CHECK_OK(fsdp_reshard(u));
    void* shard = nullptr;
    size_t numel = 0;
    CHECK_OK(fsdp_shard_grad(u, &shard, &numel));
    CHECK(cudaStreamSynchronize(r.stream) == cudaSuccess);
    // This rank's slice of the flat gradient: element i of the shard is flat index off + i.
    std::vector<float> host(numel);
    CHECK(cudaMemcpyAsync(host.data(), shard, numel * sizeof(float), cudaMemcpyDefault, r.stream) ==
          cudaSuccess);
    CHECK(cudaStreamSynchronize(r.stream) == cudaSuccess);
    size_t off = size_t(th_rank()) * numel;  // one parameter, full sharding over the world
    int bad = 0;
    for (size_t i = 0; i < numel && off + i < kN; ++i)
      bad += host[i] != 7.0f + float((off + i) % 1000);
    CHECK_MSG(bad == 0, "gradients written after fsdp_zero_grads are the ones reduced");
    CHECK_OK(fsdp_zero_grads(u));
  }
  check_device_kept(r, "the current device after the gradient calls");
}

// A read of unit a's parameters on the caller's stream, then reshard a and unshard b, which
// reuses the buffer.
void read_before_reshard(Run& r, fsdp_unit_t a, fsdp_unit_t b) {
  float* out = nullptr;
  {
    OnDevice on(r);
    CHECK(cudaMalloc(&out, kN * sizeof(float)) == cudaSuccess);
  }
  for (int rep = 0; rep < kRepeats; ++rep) {
    void* p = nullptr;
    CHECK_OK(fsdp_unshard(a));
    CHECK_OK(fsdp_param_data(a, 0, &p));
    if (rep == 0)
      CHECK_MSG(equal_to_fill(r.stream, static_cast<float*>(p), kN, 1.0f), "step 0 all-gather");
    {
      OnDevice on(r);
      spin<<<1, 1, 0, r.stream>>>(spin_cycles());
      copy<<<256, 256, 0, r.stream>>>(out, static_cast<const float*>(p), kN);
    }
    CHECK_OK(fsdp_reshard(a));
    CHECK_OK(fsdp_unshard(b));
    CHECK_OK(fsdp_reshard(b));
    CHECK(cudaStreamSynchronize(r.stream) == cudaSuccess);
    CHECK_MSG(equal_to_fill(r.stream, out, kN, 1.0f),
              "a read before fsdp_reshard sees the unit's values");
  }
  cudaFree(out);
  check_device_kept(r, "the current device after unshard and reshard");
}

}  // namespace

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_gpu_races");
  const char* mode = argc > 1 ? argv[1] : "auto";
  int count = 0;
  gpu_print_runtime_error();
  if (th_skip_without_gpu(!std::strcmp(mode, "nccl"), &count)) return 77;
  Run r;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.memory_space = FSDP_MEMORY_CUDA;
  if (!std::strcmp(mode, "mpi")) cfg.transport = FSDP_TRANSPORT_MPI;
  if (!std::strcmp(mode, "nccl")) cfg.transport = FSDP_TRANSPORT_NCCL;
  // With >= 2 GPUs each rank's library works on the GPU after its own (distinct per rank while
  // ranks <= GPUs, as NCCL needs) and the application keeps its own current: the guard must put
  // it back. With one GPU both are 0 and the device checks below cannot fail (said on rank 0).
  cfg.device = count > 1 ? (th_rank() + 1) % count : 0;
  const int app_device = count > 1 ? th_rank() % count : 0;
  if (count == 1 && th_rank() == 0)
    std::printf("note: one GPU: the current-device checks compare device 0 with itself\n");
  // The stream is on the library's device; the application then makes its own device current,
  // which no call may change.
  r.lib_device = cfg.device;
  CHECK(cudaSetDevice(cfg.device) == cudaSuccess);
  CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaSetDevice(app_device) == cudaSuccess);
  r.device = app_device;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &r.ctx));
  check_device_kept(r, "the current device after fsdp_init");
  CHECK_OK(fsdp_set_stream(r.ctx, r.stream));
  fsdp_unit_t a = make_unit(r, "a", 1.0f);
  fsdp_unit_t b = make_unit(r, "b", 2.0f);
  check_device_kept(r, "the current device after fsdp_unit_create");
  read_before_reshard(r, a, b);
  gradients_after_zero(r, a);
  CHECK_OK(fsdp_unit_destroy(&a));
  CHECK_OK(fsdp_unit_destroy(&b));
  CHECK_OK(fsdp_finalize(&r.ctx));
  cudaStreamDestroy(r.stream);
  return th_finish();
}
