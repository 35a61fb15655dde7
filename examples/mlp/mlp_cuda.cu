// The MLP on a GPU: libfsdp keeps the units in device memory and moves them with NCCL (or MPI
// staging when ranks share a GPU); cuBLAS computes the matrix products on the caller's stream,
// which libfsdp orders its own stream against (fsdp_set_stream). Two layers, y = W1 relu(W0 x +
// b0) + b1, fitted to a fixed random teacher of the same shape; AdamW; the loss must fall by half.
// Exit 77 (skipped) when a rank sees no GPU.
//
//   mpiexec -n <ranks> fsdp_mlp_cuda [steps]
//
// Layout: parameters are row-major [out][in], which cuBLAS (column-major) sees as in x out, so
// every product below transposes the weight operand (CUBLAS_OP_T) or its gradient's.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fsdp.h"

namespace {

constexpr int D = 64, H = 256, B = 128;  // inputs, hidden units, batch per rank

#define TRY(call)                                                 \
  do {                                                            \
    if ((call) != FSDP_SUCCESS) {                                 \
      std::fprintf(stderr, "%s: %s\n", #call, fsdp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                               \
    }                                                             \
  } while (0)
#define CU(call)                                                                               \
  do {                                                                                         \
    if ((call) != 0) {                                                                         \
      std::fprintf(stderr, "%s failed (%s)\n", #call, cudaGetErrorString(cudaGetLastError())); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
    }                                                                                          \
  } while (0)

__global__ void bias_relu(float* z, float* a, const float* b, int rows, int cols, bool relu) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  z[i] += b[i % rows];
  a[i] = relu ? fmaxf(z[i], 0.0f) : z[i];
}

// d = 2 (y - t) / (B * ranks): the gradient of the global mean squared error (libfsdp's mean
// divides by the ranks; this divides by the batch), and loss partial sums.
__global__ void loss_grad(const float* y, const float* t, float* d, float* loss, int n,
                          float scale) {
  __shared__ float part[256];
  float acc = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = y[i] - t[i];
    d[i] = 2.0f * e * scale;
    acc += e * e;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int h = 128; h > 0; h /= 2) {
    if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = part[0] / n;
}

// db[r] += sum over columns of g[r, c] (g column-major rows x cols); dz = g masked by z > 0.
__global__ void bias_grad(const float* g, const float* z, float* dz, float* db, int rows, int cols,
                          bool relu) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.0f;
  for (int c = 0; c < cols; ++c) {
    const float v = relu && z[c * rows + r] <= 0.0f ? 0.0f : g[c * rows + r];
    if (dz) dz[c * rows + r] = v;
    s += v;
  }
  db[r] += s;
}

struct Layer {
  fsdp_unit_t unit;
  int in, out;
};

Layer make_layer(fsdp_context_t ctx, const char* name, int in, int out, unsigned seed) {
  std::vector<float> w(static_cast<size_t>(in) * out), b(out, 0.0f);
  srand(seed);
  for (float& v : w) v = (static_cast<float>(rand()) / RAND_MAX - 0.5f) * 2.0f / sqrtf(in);
  const int64_t ws[2] = {out, in}, bs[1] = {out};
  char wn[64], bn[64];
  std::snprintf(wn, sizeof wn, "%s.weight", name);
  std::snprintf(bn, sizeof bn, "%s.bias", name);
  fsdp_param_desc_t d[2] = {{wn, 2, ws, FSDP_FLOAT32, 1}, {bn, 1, bs, FSDP_FLOAT32, 1}};
  const void* values[2] = {w.data(), b.data()};
  Layer l{nullptr, in, out};
  TRY(fsdp_unit_create(ctx, 2, d, values, &l.unit));  // host arrays: copied to the GPU
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, gpus = 0, none = 0, any = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  TRY(fsdp_cuda_device_count(&gpus));
  none = gpus == 0;
  MPI_Allreduce(&none, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (rank == 0) std::printf("skipped: no CUDA device\n");
    MPI_Finalize();
    return 77;
  }
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.memory_space = FSDP_MEMORY_CUDA;
  fsdp_context_t ctx = nullptr;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  int device = 0;
  fsdp_transport_t transport = FSDP_TRANSPORT_AUTO;
  TRY(fsdp_context_placement(ctx, nullptr, &device, nullptr, &transport));
  CU(cudaSetDevice(device));
  cudaStream_t stream;
  CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  TRY(fsdp_set_stream(ctx, stream));
  cublasHandle_t blas;
  CU(cublasCreate(&blas));
  CU(cublasSetStream(blas, stream));

  Layer l0 = make_layer(ctx, "fc0", D, H, 1), l1 = make_layer(ctx, "fc1", H, 1, 2);
  fsdp_unit_t units[2] = {l0.unit, l1.unit};
  fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  h.lr = 3e-3;
  fsdp_optimizer_t opt = nullptr;
  TRY(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 2, units, &opt));

  // Data: x uniform, targets from a fixed teacher computed on the host; each rank its own batch.
  std::vector<float> x(static_cast<size_t>(D) * B), t(B), teacher(D);
  srand(1000 + rank);
  for (float& v : x) v = static_cast<float>(rand()) / RAND_MAX * 2.0f - 1.0f;
  srand(7);
  for (float& v : teacher) v = static_cast<float>(rand()) / RAND_MAX - 0.5f;
  for (int c = 0; c < B; ++c) {
    float s = 0;
    for (int d = 0; d < D; ++d) s += teacher[d] * x[static_cast<size_t>(c) * D + d];
    t[c] = tanhf(s);
  }
  float *dx, *dt, *z0, *a0, *y, *dy, *da0, *dz0, *loss;
  CU(cudaMalloc(&dx, sizeof(float) * D * B));
  CU(cudaMalloc(&dt, sizeof(float) * B));
  CU(cudaMalloc(&z0, sizeof(float) * H * B));
  CU(cudaMalloc(&a0, sizeof(float) * H * B));
  CU(cudaMalloc(&y, sizeof(float) * B));
  CU(cudaMalloc(&dy, sizeof(float) * B));
  CU(cudaMalloc(&da0, sizeof(float) * H * B));
  CU(cudaMalloc(&dz0, sizeof(float) * H * B));
  CU(cudaMalloc(&loss, sizeof(float)));
  CU(cudaMemcpy(dx, x.data(), sizeof(float) * D * B, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dt, t.data(), sizeof(float) * B, cudaMemcpyHostToDevice));

  const float one = 1.0f, zero = 0.0f;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    float *w0, *b0, *w1, *b1, *gw0, *gb0, *gw1, *gb1;
    // Forward.
    TRY(fsdp_unshard(l0.unit));
    TRY(fsdp_param_data(l0.unit, 0, reinterpret_cast<void**>(&w0)));
    TRY(fsdp_param_data(l0.unit, 1, reinterpret_cast<void**>(&b0)));
    CU(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, H, B, D, &one, w0, D, dx, D, &zero, z0, H));
    bias_relu<<<(H * B + 255) / 256, 256, 0, stream>>>(z0, a0, b0, H, B, true);
    TRY(fsdp_reshard(l0.unit));
    TRY(fsdp_unshard(l1.unit));
    TRY(fsdp_param_data(l1.unit, 0, reinterpret_cast<void**>(&w1)));
    TRY(fsdp_param_data(l1.unit, 1, reinterpret_cast<void**>(&b1)));
    CU(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, 1, B, H, &one, w1, H, a0, H, &zero, y, 1));
    bias_relu<<<(B + 255) / 256, 256, 0, stream>>>(y, y, b1, 1, B, false);
    loss_grad<<<1, 256, 0, stream>>>(y, dt, dy, loss, B, 1.0f / B);
    // Backward: layer 1 (still unsharded), then layer 0.
    TRY(fsdp_grad_data(l1.unit, 0, reinterpret_cast<void**>(&gw1)));
    TRY(fsdp_grad_data(l1.unit, 1, reinterpret_cast<void**>(&gb1)));
    CU(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, H, 1, B, &one, a0, H, dy, 1, &one, gw1, H));
    bias_grad<<<1, 256, 0, stream>>>(dy, nullptr, nullptr, gb1, 1, B, false);
    CU(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, H, B, 1, &one, w1, H, dy, 1, &zero, da0, H));
    TRY(fsdp_reshard(l1.unit));
    TRY(fsdp_reduce_grads(l1.unit));
    TRY(fsdp_grad_data(l0.unit, 0, reinterpret_cast<void**>(&gw0)));
    TRY(fsdp_grad_data(l0.unit, 1, reinterpret_cast<void**>(&gb0)));
    bias_grad<<<(H + 255) / 256, 256, 0, stream>>>(da0, z0, dz0, gb0, H, B, true);
    CU(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, D, H, B, &one, dx, D, dz0, H, &one, gw0, D));
    TRY(fsdp_reduce_grads(l0.unit));
    TRY(fsdp_optimizer_step(opt));
    TRY(fsdp_optimizer_zero_grad(opt));

    float local = 0;
    CU(cudaMemcpyAsync(&local, loss, sizeof local, cudaMemcpyDeviceToHost, stream));
    CU(cudaStreamSynchronize(stream));
    double l = local, global = 0;
    MPI_Allreduce(&l, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    global /= size;
    if (step == 0) first = global;
    last = global;
    if (rank == 0 && (step % 10 == 0 || step == steps - 1))
      std::printf("step %3d  loss %.5f\n", step, global);
  }
  const bool ok = last < 0.5 * first;
  if (rank == 0)
    std::printf("%s: loss %.5f -> %.5f on %d rank(s), transport %s\n", ok ? "ok" : "FAILED", first,
                last, size, transport == FSDP_TRANSPORT_NCCL ? "NCCL" : "MPI (staged)");
  for (float* p : {dx, dt, z0, a0, y, dy, da0, dz0, loss}) cudaFree(p);
  cublasDestroy(blas);
  TRY(fsdp_optimizer_destroy(&opt));
  TRY(fsdp_finalize(&ctx));
  cudaStreamDestroy(stream);
  MPI_Finalize();
  return ok ? 0 : 1;
}
