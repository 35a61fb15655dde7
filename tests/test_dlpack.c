/* DLPack tensors of the library's buffers (fsdp_dlpack, fsdp_optimizer_state_dlpack,
 * fsdp_dlpack_unversioned) on a host context:
 *  - each kind (PARAM, GRAD, SHARD, GRAD_SHARD, optimizer state) describes exactly the memory the
 *    raw call gives (fsdp_param_data, fsdp_grad_data, fsdp_shard_data, fsdp_shard_grad,
 *    fsdp_optimizer_state): the same pointer, the parameter's shape or the raw call's numel,
 *    C-contiguous strides, the dtype of the unit's precision (float32, float64, bfloat16 as
 *    kDLBfloat), kDLCPU, version 1, flags 0;
 *  - values read through it equal a reference computed here (the initial values, the mean of the
 *    ranks' gradients, SGD's first momentum: the gradient), and gradients written through it are
 *    what the reduction reduces;
 *  - the deleter frees the tensor (the sanitize build finds no leak) and never the buffer; the
 *    legacy wrapper (fsdp_dlpack_unversioned) carries the same DLTensor and frees both;
 *  - bad input (NULL out, a bad `which` or index, PARAM of a sharded unit, GRAD of a frozen
 *    parameter, a destroyed unit, an unknown state name, a flagged or NULL tensor) is refused
 *    naming the call and the argument, and *out stays as it was. */
#include <stdio.h>
#include <string.h>

#include "dlpack/dlpack.h"
#include "harness.h"

enum { NP = 3 };
static const int64_t SHAPE_W[2] = {5, 3}, SHAPE_B[1] = {7}, SHAPE_F[1] = {4};
static const int64_t* SHAPES[NP] = {SHAPE_W, SHAPE_B, SHAPE_F};
static const int NDIMS[NP] = {2, 1, 1};
static const int64_t NUMEL[NP] = {15, 7, 4};

/* Small integers: exact in bfloat16, float32 and float64. */
static double value(int p, int64_t e) {
  return (double)(p * 16 + (int)e);
}

/* bfloat16 bits of a value exact in bfloat16: the high half of its float32 bits. */
static uint16_t bf16_bits(double v) {
  const float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, fsdp_dtype_t dtype, fsdp_dtype_t param_dtype,
                             const char* name) {
  static const char* names[NP] = {"w", "b", "frozen"};
  fsdp_param_desc_t d[NP];
  double v64[NP][16];
  float v32[NP][16];
  const void* values[NP];
  for (int p = 0; p < NP; ++p) {
    d[p] = (fsdp_param_desc_t){names[p], NDIMS[p], SHAPES[p], dtype, p != 2};
    for (int64_t e = 0; e < NUMEL[p]; ++e) v64[p][e] = v32[p][e] = (float)value(p, e);
    values[p] = dtype == FSDP_FLOAT64 ? (const void*)v64[p] : (const void*)v32[p];
  }
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = param_dtype;
  o.name = name;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, NP, d, values, &o, &u));
  return u;
}

static int dtype_is(const DLTensor* t, uint8_t code, uint8_t bits) {
  return t->dtype.code == code && t->dtype.bits == bits && t->dtype.lanes == 1;
}

static int dl_code(fsdp_dtype_t t) {
  return t == FSDP_BFLOAT16 ? kDLBfloat : kDLFloat;
}

static int dl_bits(fsdp_dtype_t t) {
  return t == FSDP_FLOAT64 ? 64 : t == FSDP_FLOAT32 ? 32 : 16;
}

/* What every tensor of a host context says, whatever its buffer. */
static void check_common(const DLManagedTensorVersioned* t, const void* raw, fsdp_dtype_t dtype) {
  CHECK(t->version.major == 1);
  CHECK(t->flags == 0);
  CHECK(t->deleter != NULL);
  CHECK(t->dl_tensor.data == raw);
  CHECK(t->dl_tensor.byte_offset == 0);
  CHECK(t->dl_tensor.device.device_type == kDLCPU && t->dl_tensor.device.device_id == 0);
  CHECK(dtype_is(&t->dl_tensor, (uint8_t)dl_code(dtype), (uint8_t)dl_bits(dtype)));
}

static void check_shape(const DLTensor* t, int ndim, const int64_t* shape) {
  CHECK(t->ndim == ndim);
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    CHECK(t->shape[d] == shape[d]);
    CHECK(t->strides[d] == stride);
    stride *= shape[d];
  }
}

/* Element e of a tensor of `dtype` as a double (bfloat16: its bits compared separately). */
static double element(const void* data, fsdp_dtype_t dtype, int64_t e) {
  if (dtype == FSDP_FLOAT64) return ((const double*)data)[e];
  if (dtype == FSDP_FLOAT32) return ((const float*)data)[e];
  uint32_t bits = (uint32_t)((const uint16_t*)data)[e] << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static void check_params(fsdp_unit_t u, fsdp_dtype_t param_dtype) {
  CHECK_OK(fsdp_unshard(u));
  for (int p = 0; p < NP; ++p) {
    void* raw = NULL;
    DLManagedTensorVersioned* t = NULL;
    CHECK_OK(fsdp_param_data(u, p, &raw));
    CHECK_OK(fsdp_dlpack(u, FSDP_BUFFER_PARAM, p, &t));
    if (!t) continue;
    check_common(t, raw, param_dtype);
    check_shape(&t->dl_tensor, NDIMS[p], SHAPES[p]);
    for (int64_t e = 0; e < NUMEL[p]; ++e) {
      CHECK(element(t->dl_tensor.data, param_dtype, e) == value(p, e));
      if (param_dtype == FSDP_BFLOAT16)
        CHECK(((const uint16_t*)t->dl_tensor.data)[e] == bf16_bits(value(p, e)));
    }
    t->deleter(t);
  }
  /* a frozen parameter's gradient does not exist: refused, *out as it was */
  DLManagedTensorVersioned* keep = (DLManagedTensorVersioned*)&keep;
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_GRAD, 2, &keep), FSDP_ERR_INVALID_ARGUMENT,
              "requires_grad");
  CHECK(keep == (DLManagedTensorVersioned*)&keep);
  CHECK_OK(fsdp_reshard(u));
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_PARAM, 0, &keep), FSDP_ERR_STATE, "fsdp_dlpack");
  CHECK(keep == (DLManagedTensorVersioned*)&keep);
}

/* Writes rank + 1 into every trainable parameter's gradient through its DLPack tensor, and
 * reduces: the mean over the ranks is (W + 1) / 2. */
static void write_grads(fsdp_unit_t u, fsdp_dtype_t param_dtype) {
  for (int p = 0; p < 2; ++p) {
    void* raw = NULL;
    DLManagedTensorVersioned* t = NULL;
    CHECK_OK(fsdp_dlpack(u, FSDP_BUFFER_GRAD, p, &t));
    CHECK_OK(fsdp_grad_data(u, p, &raw));
    if (!t) continue;
    check_common(t, raw, param_dtype);
    check_shape(&t->dl_tensor, NDIMS[p], SHAPES[p]);
    const double g = th_rank() + 1;
    for (int64_t e = 0; e < NUMEL[p]; ++e) {
      if (param_dtype == FSDP_FLOAT64)
        ((double*)t->dl_tensor.data)[e] = g;
      else if (param_dtype == FSDP_FLOAT32)
        ((float*)t->dl_tensor.data)[e] = (float)g;
      else
        ((uint16_t*)t->dl_tensor.data)[e] = bf16_bits(g);
    }
    t->deleter(t);
  }
  CHECK_OK(fsdp_reduce_grads(u));
}

/* A 1-D tensor of the shard's layout: at each parameter's range, `expect(p, param_offset + k)`;
 * elsewhere (padding) zero. `trainable_only`: the gradient shard's layout. */
static void check_shard_values(fsdp_unit_t u, const DLManagedTensorVersioned* t, fsdp_dtype_t dt,
                               int trainable_only, double (*expect)(int p, int64_t e)) {
  const int64_t n = t->dl_tensor.shape[0];
  for (int64_t k = 0; k < n; ++k) {
    double want = 0;
    for (int p = 0; p < (trainable_only ? 2 : NP); ++p) {
      size_t so = 0, po = 0, len = 0;
      CHECK_OK(fsdp_param_shard_range(u, p, &so, &po, &len));
      if ((size_t)k >= so && (size_t)k < so + len) want = expect(p, (int64_t)(po + (size_t)k - so));
    }
    if (element(t->dl_tensor.data, dt, k) != want) {
      CHECK_MSG(0, "shard element differs from the reference");
      return;
    }
  }
}

static double mean_grad(int p, int64_t e) {
  (void)p, (void)e;
  return (th_size() + 1) / 2.0;
}

/* A 1-D tensor of the shard's layout (the shard, the gradient shard, optimizer state) against
 * the raw call's pointer and numel, and its values against `expect`; then deleted. */
static void check_1d(fsdp_unit_t u, DLManagedTensorVersioned* t, const void* raw, size_t numel,
                     fsdp_dtype_t storage, int trainable_only, double (*expect)(int, int64_t)) {
  if (!t) return;
  check_common(t, raw, storage);
  const int64_t shape[1] = {(int64_t)numel};
  check_shape(&t->dl_tensor, 1, shape);
  check_shard_values(u, t, storage, trainable_only, expect);
  t->deleter(t);
}

static void check_shards(fsdp_unit_t u, fsdp_dtype_t storage) {
  void* raw = NULL;
  size_t numel = 0;
  DLManagedTensorVersioned* t = NULL;
  CHECK_OK(fsdp_dlpack(u, FSDP_BUFFER_SHARD, 0, &t));
  CHECK_OK(fsdp_shard_data(u, &raw, &numel));
  check_1d(u, t, raw, numel, storage, 0, value);
  t = NULL;
  CHECK_OK(fsdp_dlpack(u, FSDP_BUFFER_GRAD_SHARD, 0, &t));
  CHECK_OK(fsdp_shard_grad(u, &raw, &numel));
  check_1d(u, t, raw, numel, storage, 1, mean_grad);
}

/* SGD with momentum: after one step, the momentum buffer is the gradient (torch.optim.SGD). */
static void check_optimizer_state(fsdp_context_t ctx, fsdp_unit_t u, fsdp_dtype_t storage) {
  fsdp_hyperparams_t h = FSDP_SGD_DEFAULTS;
  h.momentum = 0.9;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &h, 1, &u, &opt));
  CHECK_OK(fsdp_optimizer_step(opt));
  void* raw = NULL;
  size_t numel = 0;
  DLManagedTensorVersioned* t = NULL;
  CHECK_OK(fsdp_optimizer_state_dlpack(opt, u, "momentum", &t));
  CHECK_OK(fsdp_optimizer_state(opt, u, "momentum", &raw, &numel));
  check_1d(u, t, raw, numel, storage, 1, mean_grad);
  DLManagedTensorVersioned* keep = (DLManagedTensorVersioned*)&keep;
  CHECK_FAILS(fsdp_optimizer_state_dlpack(opt, u, "exp_avg", &keep), FSDP_ERR_INVALID_ARGUMENT,
              "name");
  CHECK_FAILS(fsdp_optimizer_state_dlpack(opt, u, NULL, &keep), FSDP_ERR_INVALID_ARGUMENT, "name");
  CHECK_FAILS(fsdp_optimizer_state_dlpack(opt, u, "momentum", NULL), FSDP_ERR_INVALID_ARGUMENT,
              "out");
  CHECK(keep == (DLManagedTensorVersioned*)&keep);
  CHECK_OK(fsdp_optimizer_destroy(&opt));
}

static void check_unit(fsdp_context_t ctx, fsdp_dtype_t dtype, fsdp_dtype_t param_dtype,
                       const char* name) {
  fsdp_unit_t u = make_unit(ctx, dtype, param_dtype, name);
  if (!u) return;
  const fsdp_dtype_t compute = param_dtype == FSDP_DTYPE_AUTO ? dtype : param_dtype;
  check_params(u, compute);
  write_grads(u, compute);
  check_shards(u, dtype);
  check_optimizer_state(ctx, u, dtype);
  CHECK_OK(fsdp_unit_destroy(&u));
}

static void check_bad_input(fsdp_context_t ctx) {
  fsdp_unit_t u = make_unit(ctx, FSDP_FLOAT32, FSDP_DTYPE_AUTO, "bad");
  if (!u) return;
  DLManagedTensorVersioned* keep = (DLManagedTensorVersioned*)&keep;
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_SHARD, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, "out");
  CHECK_FAILS(fsdp_dlpack(u, (fsdp_buffer_t)99, 0, &keep), FSDP_ERR_INVALID_ARGUMENT, "which");
  CHECK_FAILS(fsdp_dlpack(u, (fsdp_buffer_t)-1, 0, &keep), FSDP_ERR_INVALID_ARGUMENT, "which");
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_SHARD, 1, &keep), FSDP_ERR_INVALID_ARGUMENT, "index");
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_GRAD_SHARD, -1, &keep), FSDP_ERR_INVALID_ARGUMENT,
              "index");
  CHECK_OK(fsdp_unshard(u));
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_PARAM, NP, &keep), FSDP_ERR_OUT_OF_RANGE, "index");
  CHECK_FAILS(fsdp_dlpack(u, FSDP_BUFFER_GRAD, -1, &keep), FSDP_ERR_OUT_OF_RANGE, "index");
  CHECK_OK(fsdp_reshard(u));
  CHECK(keep == (DLManagedTensorVersioned*)&keep);

  /* the legacy wrapper: the same DLTensor; its deleter frees both structs */
  DLManagedTensorVersioned* t = NULL;
  DLManagedTensor* legacy = (DLManagedTensor*)&keep;
  CHECK_FAILS(fsdp_dlpack_unversioned(NULL, &legacy), FSDP_ERR_INVALID_ARGUMENT, "tensor");
  CHECK_OK(fsdp_dlpack(u, FSDP_BUFFER_SHARD, 0, &t));
  if (t) {
    CHECK_FAILS(fsdp_dlpack_unversioned(t, NULL), FSDP_ERR_INVALID_ARGUMENT, "out");
    t->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    CHECK_FAILS(fsdp_dlpack_unversioned(t, &legacy), FSDP_ERR_INVALID_ARGUMENT, "flags");
    t->flags = 0;
    CHECK(legacy == (DLManagedTensor*)&keep);
    CHECK_OK(fsdp_dlpack_unversioned(t, &legacy));
    CHECK(legacy->dl_tensor.data == t->dl_tensor.data);
    CHECK(legacy->dl_tensor.ndim == 1 && legacy->dl_tensor.shape == t->dl_tensor.shape &&
          legacy->dl_tensor.strides == t->dl_tensor.strides);
    CHECK(dtype_is(&legacy->dl_tensor, kDLFloat, 32));
    CHECK(legacy->dl_tensor.device.device_type == kDLCPU);
    legacy->deleter(legacy); /* frees t too */
  }

  /* a destroyed unit's handle */
  fsdp_unit_t stale = u;
  CHECK_OK(fsdp_unit_destroy(&u));
  CHECK_FAILS(fsdp_dlpack(stale, FSDP_BUFFER_SHARD, 0, &keep), FSDP_ERR_DESTROYED_HANDLE, "unit");
  CHECK(keep == (DLManagedTensorVersioned*)&keep);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_dlpack");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  check_unit(ctx, FSDP_FLOAT32, FSDP_DTYPE_AUTO, "f32");
  check_unit(ctx, FSDP_FLOAT64, FSDP_DTYPE_AUTO, "f64");
  check_unit(ctx, FSDP_FLOAT32, FSDP_BFLOAT16, "bf16");
  check_bad_input(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
