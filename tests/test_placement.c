/* Placement on a machine of any kind: the GPU settings of fsdp_config_t are validated on every
 * rank (a bad value fails with the field named, and no context is made), CUDA is refused cleanly
 * where there is no device, fsdp_abort refuses every later call but fsdp_finalize, and
 * steady-state training makes no allocator calls (counted by the library, checked here against
 * the first steps, which must allocate). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static fsdp_context_t sentinel(void) {
  return (fsdp_context_t)(uintptr_t)0x1234;
}

static void check_refused(fsdp_config_t cfg, fsdp_status_t want, const char* needle) {
  fsdp_context_t ctx = sentinel();
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), want, needle);
  CHECK(ctx == sentinel()); /* nothing was written */
}

static void bad_configs(void) {
  fsdp_config_t c = FSDP_CONFIG_INIT;
  c.memory_space = (fsdp_memory_space_t)7;
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->memory_space");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.transport = (fsdp_transport_t)9;
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->transport");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.device = -2;
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->device");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.device = 0; /* a device for a host context */
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->device");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.cpu_offload = 2;
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->cpu_offload");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.cpu_offload = 1; /* offload of host memory */
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->cpu_offload");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.transport = FSDP_TRANSPORT_NCCL; /* NCCL on host memory */
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->transport");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.memory_space = FSDP_MEMORY_CUDA;
  c.transport = FSDP_TRANSPORT_SHM; /* node shared memory for device memory */
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->transport");
  c = (fsdp_config_t)FSDP_CONFIG_INIT;
  c.transport = FSDP_TRANSPORT_COUNT;
  check_refused(c, FSDP_ERR_INVALID_ARGUMENT, "cfg->transport");

  setenv("FSDP_TRANSPORT", "carrier-pigeon", 1);
  check_refused((fsdp_config_t)FSDP_CONFIG_INIT, FSDP_ERR_INVALID_ARGUMENT, "FSDP_TRANSPORT");
  unsetenv("FSDP_TRANSPORT");
}

/* Without a device every rank refuses a CUDA context, with or without offload and NCCL. */
static void cuda_without_device(void) {
  int count = -1;
  CHECK_FAILS(fsdp_cuda_device_count(NULL), FSDP_ERR_INVALID_ARGUMENT, "count");
  CHECK_OK(fsdp_cuda_device_count(&count));
  CHECK(count >= 0);
  int any = 0;
  MPI_Allreduce(&count, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any > 0) return; /* the GPU tests cover this machine */
  fsdp_config_t c = FSDP_CONFIG_INIT;
  c.memory_space = FSDP_MEMORY_CUDA;
  check_refused(c, FSDP_ERR_UNSUPPORTED, "FSDP_MEMORY_CUDA");
  c.cpu_offload = 1;
  check_refused(c, FSDP_ERR_UNSUPPORTED, "FSDP_MEMORY_CUDA");
  c.cpu_offload = 0;
  c.transport = FSDP_TRANSPORT_NCCL;
  check_refused(c, FSDP_ERR_UNSUPPORTED, "FSDP_MEMORY_CUDA");
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, float* values) {
  static const int64_t shape[2] = {37, 11};
  fsdp_param_desc_t d = {"w", 2, shape, FSDP_FLOAT32, 1};
  const void* v[1] = {values};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &d, v, &u));
  return u;
}

/* A host context reports its placement, refuses a stream, and trains without allocating after
 * the first steps. */
static void host_context(void) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  fsdp_memory_space_t space = FSDP_MEMORY_CUDA;
  int device = 5, offload = 5;
  fsdp_transport_t transport = FSDP_TRANSPORT_AUTO;
  CHECK_OK(fsdp_context_placement(ctx, &space, &device, &offload, &transport));
  /* Auto: the node shared-memory transport once a shard group has two ranks on a node (one
   * machine here), unless FSDP_TRANSPORT says otherwise. */
  const char* env = getenv("FSDP_TRANSPORT");
  fsdp_transport_t want = th_size() > 1 ? FSDP_TRANSPORT_SHM : FSDP_TRANSPORT_MPI;
  if (env && strcmp(env, "mpi") == 0) want = FSDP_TRANSPORT_MPI;
  if (env && strcmp(env, "shm") == 0) want = FSDP_TRANSPORT_SHM;
  CHECK(space == FSDP_MEMORY_HOST && device == -1 && offload == 0 && transport == want);
  CHECK_FAILS(fsdp_set_stream(ctx, NULL), FSDP_ERR_UNSUPPORTED, "ctx");

  float values[37 * 11];
  for (int i = 0; i < 37 * 11; ++i) values[i] = (float)i / 100.0f;
  const uint64_t before = th_allocation_calls(ctx);
  fsdp_unit_t u = make_unit(ctx, values);
  CHECK(th_allocation_calls(ctx) > before); /* the shard: counting counts */
  fsdp_optimizer_t opt = NULL;
  const fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 1, &u, &opt));
  uint64_t after_warmup = 0;
  for (int step = 0; step < 6; ++step) {
    CHECK_OK(fsdp_unshard(u));
    float* g = NULL;
    CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
    for (int i = 0; i < 37 * 11; ++i) g[i] = (float)((i + step) % 7) - 3.0f;
    CHECK_OK(fsdp_reshard(u));
    CHECK_OK(fsdp_reduce_grads(u));
    CHECK_OK(fsdp_optimizer_step(opt));
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
    if (step == 1) after_warmup = th_allocation_calls(ctx);
  }
  CHECK_MSG(th_allocation_calls(ctx) == after_warmup, "steady-state steps called the allocator");
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_finalize(&ctx));
}

/* After fsdp_abort only fsdp_finalize is taken, on the context and everything made over it. */
static void abort_context(void) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  float values[37 * 11] = {0};
  fsdp_unit_t u = make_unit(ctx, values);
  fsdp_optimizer_t opt = NULL;
  const fsdp_hyperparams_t h = FSDP_SGD_DEFAULTS;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &h, 1, &u, &opt));
  CHECK_FAILS(fsdp_abort(NULL), FSDP_ERR_INVALID_HANDLE, "ctx");
  CHECK_OK(fsdp_abort(ctx));
  CHECK_OK(fsdp_abort(ctx)); /* again: no-op */
  CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_ABORTED, "unit");
  CHECK_FAILS(fsdp_optimizer_step(opt), FSDP_ERR_ABORTED, "opt");
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  CHECK_FAILS(fsdp_memory_stats(ctx, &m), FSDP_ERR_ABORTED, "ctx");
  CHECK_FAILS(fsdp_unit_destroy(&u), FSDP_ERR_ABORTED, "unit");
  CHECK(u != NULL); /* left as it was */
  CHECK_OK(fsdp_finalize(&ctx));
  CHECK(ctx == NULL);
  CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_FINALIZED, "unit");
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_placement");
  bad_configs();
  cuda_without_device();
  host_context();
  abort_context();
  return th_finish();
}
