/* Every bad input gets its own status and a message naming the call and the argument, and leaves
 * every object exactly as it was: output arguments untouched, unit values and state unchanged,
 * the context still usable. Run at 1, 2 and 3 ranks (3: a factor that does not divide W). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static const int64_t shape_w[2] = {3, 4}, shape_b[1] = {5}, shape_bad[2] = {3, 0};

static void descs_ok(fsdp_param_desc_t d[2]) {
  fsdp_param_desc_t w = {"w", 2, shape_w, FSDP_FLOAT32, 1};
  fsdp_param_desc_t b = {"b", 1, shape_b, FSDP_FLOAT32, 0}; /* frozen */
  d[0] = w;
  d[1] = b;
}

static float w_vals[12], b_vals[5];

static fsdp_unit_t make_unit(fsdp_context_t ctx) {
  fsdp_param_desc_t d[2];
  descs_ok(d);
  const void* init[2] = {w_vals, b_vals};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 2, d, init, &u));
  return u;
}

/* The unit's parameters still equal the values it was created with. */
static void check_values_intact(fsdp_unit_t u, const char* after) {
  float *w = NULL, *b = NULL;
  CHECK_OK(fsdp_param_data(u, 0, (void**)&w));
  CHECK_OK(fsdp_param_data(u, 1, (void**)&b));
  CHECK_MSG(
      w && b && memcmp(w, w_vals, sizeof w_vals) == 0 && memcmp(b, b_vals, sizeof b_vals) == 0,
      after);
}

static void bad_configs(void) {
  const int W = th_size();
  fsdp_context_t ctx = (fsdp_context_t)(uintptr_t)0x1234;
  const fsdp_context_t untouched = ctx;
  fsdp_config_t cfg;

  CHECK_FAILS(fsdp_init(MPI_COMM_NULL, NULL, &ctx), FSDP_ERR_INVALID_ARGUMENT, "fsdp_init: comm");
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, NULL, NULL), FSDP_ERR_INVALID_ARGUMENT, "ctx");

  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.size = 4;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->size");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.magic = 0;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->magic");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.version = FSDP_VERSION_NUMBER(FSDP_VERSION_MAJOR + 1, 0, 0);
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_VERSION, "cfg->version");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.version = FSDP_VERSION_NUMBER(FSDP_VERSION_MAJOR, FSDP_VERSION_MINOR + 1, 0);
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_VERSION, "headers");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.strategy = (fsdp_sharding_strategy_t)17;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "cfg->strategy");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.grad_reduction = (fsdp_grad_reduction_t)5;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT,
              "cfg->grad_reduction");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.sharding_factor = -1;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT,
              "cfg->sharding_factor");
  cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
  cfg.strategy = FSDP_HYBRID_SHARD;
  cfg.sharding_factor = W + 1;
  CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT,
              "cfg->sharding_factor");
  if (W == 3) {
    cfg.sharding_factor = 2;
    CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT,
                "does not divide the world size 3");
  }
  if (W >= 2) {
    cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
    cfg.sharding_factor = 1; /* full shard means F = W */
    CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT,
                "FSDP_HYBRID_SHARD");
    cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
    cfg.strategy = FSDP_NO_SHARD;
    cfg.sharding_factor = 2;
    CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_INVALID_ARGUMENT, "FSDP_NO_SHARD");

    /* Ranks passing different configs: every rank fails, none hangs. */
    cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
    if (th_rank() == 1) cfg.grad_reduction = FSDP_REDUCE_SUM;
    CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx), FSDP_ERR_MISMATCH, "differ across ranks");
    /* One rank's own argument error: that rank reports it, the others a mismatch naming it. */
    cfg = (fsdp_config_t)FSDP_CONFIG_INIT;
    if (th_rank() == 1) cfg.strategy = (fsdp_sharding_strategy_t)9;
    CHECK_FAILS(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx),
                th_rank() == 1 ? FSDP_ERR_INVALID_ARGUMENT : FSDP_ERR_MISMATCH,
                th_rank() == 1 ? "cfg->strategy" : "rank(s) 1 rejected");
  }
  CHECK_MSG(ctx == untouched, "failed fsdp_init leaves *ctx untouched");

  CHECK_FAILS(fsdp_check_version(FSDP_VERSION_MAJOR + 1, 0, 0), FSDP_ERR_VERSION,
              "fsdp_check_version");
  CHECK_FAILS(fsdp_check_version(FSDP_VERSION_MAJOR, FSDP_VERSION_MINOR + 1, 0), FSDP_ERR_VERSION,
              "headers");
  CHECK_FAILS(fsdp_config_defaults(NULL, sizeof cfg), FSDP_ERR_INVALID_ARGUMENT, "cfg");
  CHECK_FAILS(fsdp_config_defaults(&cfg, 3), FSDP_ERR_INVALID_ARGUMENT, "size");
}

static void bad_descriptors(fsdp_context_t ctx) {
  fsdp_param_desc_t d[2];
  fsdp_unit_t u = (fsdp_unit_t)(uintptr_t)0x77;
  const fsdp_unit_t untouched = u;
  int not_a_handle = 0;

  descs_ok(d);
  CHECK_FAILS(fsdp_unit_create(NULL, 2, d, NULL, &u), FSDP_ERR_INVALID_HANDLE,
              "fsdp_unit_create: ctx: NULL");
  CHECK_FAILS(fsdp_unit_create((fsdp_context_t)&not_a_handle, 2, d, NULL, &u),
              FSDP_ERR_INVALID_HANDLE, "foreign");
  CHECK_FAILS(fsdp_unit_create(ctx, 0, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "nparams = 0");
  CHECK_FAILS(fsdp_unit_create(ctx, -3, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "nparams = -3");
  CHECK_FAILS(fsdp_unit_create(ctx, 2, NULL, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs: NULL");
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, NULL), FSDP_ERR_INVALID_ARGUMENT, "unit");

  descs_ok(d);
  d[1].name = NULL;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs[1].name");
  d[1].name = "";
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs[1].name");
  d[1].name = "w";
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "already used");
  descs_ok(d);
  d[0].shape = shape_bad;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT,
              "descs[0].shape[1] = 0");
  const int64_t negative[1] = {-5};
  descs_ok(d);
  d[1].shape = negative;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT,
              "descs[1].shape[0] = -5");
  descs_ok(d);
  d[0].ndim = -1;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs[0].ndim");
  d[0].ndim = FSDP_MAX_NDIM + 1;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs[0].ndim");
  descs_ok(d);
  d[0].shape = NULL;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs[0].shape");
  const int64_t huge[3] = {INT64_C(1) << 30, INT64_C(1) << 30, INT64_C(1) << 30};
  descs_ok(d);
  d[0].ndim = 3;
  d[0].shape = huge;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "too large");
  descs_ok(d);
  d[1].dtype = (fsdp_dtype_t)42;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "descs[1].dtype");
  d[1].dtype = FSDP_BFLOAT16;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "param_dtype");
  d[1].dtype = FSDP_FLOAT64;
  CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_INVALID_ARGUMENT, "one dtype");

  /* Descriptors that differ across ranks: caught on every rank by the collective check. */
  if (th_size() >= 2) {
    const int64_t other[1] = {6};
    descs_ok(d);
    if (th_rank() == 1) d[1].shape = other;
    CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_MISMATCH, "differ across ranks");
    descs_ok(d);
    CHECK_FAILS(fsdp_unit_create(ctx, th_rank() == 1 ? 1 : 2, d, NULL, &u), FSDP_ERR_MISMATCH,
                "rank(s) 1");
    descs_ok(d);
    if (th_rank() == 1) d[0].dtype = d[1].dtype = FSDP_FLOAT64;
    CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_MISMATCH, "differ");
    descs_ok(d);
    if (th_rank() == 1) {
      fsdp_param_desc_t t = d[0];
      d[0] = d[1];
      d[1] = t;
    }
    CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_MISMATCH, "differ");
    descs_ok(d);
    if (th_rank() == 1) d[0].name = "w2";
    CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_MISMATCH, "differ");
    descs_ok(d);
    if (th_rank() == 1) d[1].requires_grad = 1;
    CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u), FSDP_ERR_MISMATCH, "differ");
    /* One rank with a local error: it reports it, the others name it. */
    descs_ok(d);
    if (th_rank() == 1) d[0].shape = shape_bad;
    CHECK_FAILS(fsdp_unit_create(ctx, 2, d, NULL, &u),
                th_rank() == 1 ? FSDP_ERR_INVALID_ARGUMENT : FSDP_ERR_MISMATCH,
                th_rank() == 1 ? "descs[0].shape[1]" : "rank(s) 1 rejected");
  }
  CHECK_MSG(u == untouched, "failed fsdp_unit_create leaves *unit untouched");

  /* After all that, the context works: no unit was half-created. */
  fsdp_memory_stats_t m = {sizeof m, 0, 0, 0, 0, 0, 0, 0};
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  CHECK_MSG(m.shard_bytes == 0, "failed creates allocated nothing");
  fsdp_unit_t good = make_unit(ctx);
  CHECK_OK(fsdp_unshard(good));
  check_values_intact(good, "unit created after failed creates");
  CHECK_OK(fsdp_unit_destroy(&good));
}

/* The context already made unit 0 (bad_descriptors), so this is unit 1: ids are never reused. */
static void bad_unit_calls(fsdp_context_t ctx) {
  fsdp_unit_t u = make_unit(ctx);
  void* p = (void*)(uintptr_t)0x99;
  const void* untouched = p;
  size_t n = 77;

  CHECK_FAILS(fsdp_unshard(NULL), FSDP_ERR_INVALID_HANDLE, "fsdp_unshard: unit: NULL");
  CHECK_FAILS(fsdp_unshard((fsdp_unit_t)ctx), FSDP_ERR_INVALID_HANDLE, "a context handle");
  CHECK_FAILS(fsdp_group_info((fsdp_context_t)u, FSDP_GROUP_SHARD, NULL, NULL),
              FSDP_ERR_INVALID_HANDLE, "a unit handle");

  /* Sharded state. */
  CHECK_FAILS(fsdp_reshard(u), FSDP_ERR_STATE, "fsdp_reshard: unit 1 is not unsharded");
  CHECK_FAILS(fsdp_param_data(u, 0, &p), FSDP_ERR_STATE, "fsdp_param_data: unit 1 is sharded");
  CHECK_FAILS(fsdp_reduce_grads(u), FSDP_ERR_STATE, "fsdp_reduce_grads: unit 1 has no gradient");

  /* Unsharded state. */
  CHECK_OK(fsdp_unshard(u));
  CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_STATE, "fsdp_unshard: unit 1 is already unsharded");
  check_values_intact(u, "a second fsdp_unshard changes nothing");
  CHECK_FAILS(fsdp_param_data(u, 2, &p), FSDP_ERR_OUT_OF_RANGE, "index = 2");
  CHECK_FAILS(fsdp_param_data(u, -1, &p), FSDP_ERR_OUT_OF_RANGE, "index = -1");
  CHECK_FAILS(fsdp_param_data(u, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, "data");
  CHECK_FAILS(fsdp_grad_data(u, 5, &p), FSDP_ERR_OUT_OF_RANGE, "fsdp_grad_data: unit 1: index = 5");
  CHECK_FAILS(fsdp_grad_data(u, 1, &p), FSDP_ERR_INVALID_ARGUMENT, "requires_grad = 0");
  CHECK_FAILS(fsdp_param_shard_range(u, 9, NULL, NULL, NULL), FSDP_ERR_OUT_OF_RANGE, "index = 9");
  CHECK_FAILS(fsdp_param_numel(u, 3, &n), FSDP_ERR_OUT_OF_RANGE, "index = 3");
  CHECK_FAILS(fsdp_param_numel(u, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, "numel");
  CHECK_MSG(p == untouched && n == 77, "failed calls leave outputs untouched");
  check_values_intact(u, "after the failed calls");

  /* reduce_grads: a failed call leaves the gradient shard as it was. */
  float *g = NULL, *gs = NULL;
  size_t shard_n = 0;
  CHECK_OK(fsdp_grad_data(u, 0, (void**)&g));
  for (int i = 0; i < 12; ++i) g[i] = (float)(i + 1);
  CHECK_OK(fsdp_reduce_grads(u));
  CHECK_OK(fsdp_shard_grad(u, (void**)&gs, &shard_n));
  float before[16];
  memcpy(before, gs, shard_n * sizeof(float));
  CHECK_FAILS(fsdp_reduce_grads(u), FSDP_ERR_STATE, "no gradient to reduce");
  CHECK_MSG(memcmp(before, gs, shard_n * sizeof(float)) == 0, "gradient shard unchanged");
  CHECK_OK(fsdp_reshard(u));

  CHECK_FAILS(fsdp_group_info(ctx, (fsdp_group_t)7, NULL, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "group = 7");
  CHECK_FAILS(fsdp_memory_stats(ctx, NULL), FSDP_ERR_INVALID_ARGUMENT, "stats");
  fsdp_memory_stats_t m;
  m.size = 0;
  CHECK_FAILS(fsdp_memory_stats(ctx, &m), FSDP_ERR_INVALID_ARGUMENT, "stats->size");

  /* The statuses fsdp.h lists for the context queries and fsdp_convert, and nothing else. */
  CHECK_FAILS(fsdp_trim_pool(NULL), FSDP_ERR_INVALID_HANDLE, "fsdp_trim_pool");
  CHECK_FAILS(fsdp_reset_peak_memory(NULL), FSDP_ERR_INVALID_HANDLE, "fsdp_reset_peak_memory");
  CHECK_FAILS(fsdp_context_config(NULL, NULL, NULL, NULL), FSDP_ERR_INVALID_HANDLE,
              "fsdp_context_config");
  CHECK_OK(fsdp_context_config(ctx, NULL, NULL, NULL));
  {
    float src[4] = {1, 2, 3, 4}, dst[4] = {0, 0, 0, 0};
    CHECK_FAILS(fsdp_convert(dst, (fsdp_dtype_t)9, src, FSDP_FLOAT32, 4), FSDP_ERR_INVALID_ARGUMENT,
                "dst_dtype = 9");
    CHECK_FAILS(fsdp_convert(dst, FSDP_FLOAT32, src, (fsdp_dtype_t)-3, 4),
                FSDP_ERR_INVALID_ARGUMENT, "src_dtype = -3");
    CHECK_FAILS(fsdp_convert(NULL, FSDP_FLOAT32, src, FSDP_FLOAT32, 4), FSDP_ERR_INVALID_ARGUMENT,
                "dst: NULL");
    CHECK_FAILS(fsdp_convert(src + 1, FSDP_FLOAT32, src, FSDP_FLOAT32, 2),
                FSDP_ERR_INVALID_ARGUMENT, "overlap");
    CHECK_MSG(dst[0] == 0 && src[1] == 2, "a refused conversion writes nothing");
    CHECK_OK(fsdp_convert(NULL, FSDP_FLOAT32, NULL, FSDP_FLOAT32, 0));
  }

  /* Destroyed handles. */
  fsdp_unit_t copy = u;
  CHECK_OK(fsdp_unit_destroy(&u));
  CHECK(u == NULL);
  CHECK_FAILS(fsdp_unshard(copy), FSDP_ERR_DESTROYED_HANDLE, "destroyed");
  CHECK_FAILS(fsdp_unit_destroy(&copy), FSDP_ERR_DESTROYED_HANDLE, "fsdp_unit_destroy: *unit");
  CHECK_FAILS(fsdp_unit_destroy(&u), FSDP_ERR_INVALID_HANDLE, "NULL");
  CHECK_FAILS(fsdp_unit_destroy(NULL), FSDP_ERR_INVALID_ARGUMENT, "unit");
}

static void after_finalize(void) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  fsdp_unit_t u = make_unit(ctx);
  fsdp_context_t stale = ctx;
  CHECK_OK(fsdp_finalize(&ctx));
  CHECK(ctx == NULL);
  CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_FINALIZED, "finalized");
  CHECK_FAILS(fsdp_unit_destroy(&u), FSDP_ERR_FINALIZED, "finalized");
  CHECK_FAILS(fsdp_group_info(stale, FSDP_GROUP_WORLD, NULL, NULL), FSDP_ERR_FINALIZED,
              "fsdp_group_info: ctx");
  CHECK_FAILS(fsdp_finalize(&stale), FSDP_ERR_FINALIZED, "fsdp_finalize");
  CHECK_FAILS(fsdp_finalize(&ctx), FSDP_ERR_INVALID_HANDLE, "NULL");
  CHECK_FAILS(fsdp_finalize(NULL), FSDP_ERR_INVALID_ARGUMENT, "ctx");
}

static void status_strings(void) {
  int distinct = 1;
  for (int s = 0; s < FSDP_STATUS_COUNT; ++s)
    for (int t = s + 1; t < FSDP_STATUS_COUNT; ++t)
      distinct &=
          strcmp(fsdp_status_string((fsdp_status_t)s), fsdp_status_string((fsdp_status_t)t)) != 0;
  CHECK_MSG(distinct, "every status has its own text");
  CHECK(strstr(fsdp_status_string((fsdp_status_t)999), "unknown") != NULL);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_bad_input");
  for (int i = 0; i < 12; ++i) w_vals[i] = (float)i * 0.25f - 1.0f;
  for (int i = 0; i < 5; ++i) b_vals[i] = (float)i + 0.5f;
  bad_configs();
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  bad_descriptors(ctx);
  bad_unit_calls(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
  after_finalize();
  status_strings();
  return th_finish();
}
