/* Optimizer state from outside (fsdp_optimizer_state, fsdp_optimizer_steps, _set_steps) and a
 * checkpoint's description (fsdp_checkpoint_describe), what converters such as libfsdp.dcp use:
 *  - after three AdamW steps each rank's exp_avg and exp_avg_sq slices equal the non-sharded
 *    reference (ref_optim.h, PyTorch's order) bit for bit, and the step count is 3;
 *  - state written through the pointers and a step count set by hand are what a save writes: a
 *    fresh optimizer loads them back bit for bit (on this rank count; the file's description names
 *    every parameter, shape and step), and the next step from there equals the reference's next
 *    step from the same values;
 *  - AMSGrad and maximize: hyperparameters and max_exp_avg_sq saved, loaded and stepped on;
 *  - bad input (NULL, an unknown state name, a unit the optimizer does not update, a frozen unit,
 *    a negative count, a capacity too small, a missing file) is refused naming the argument and
 *    changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref_optim.h"

enum { NP = 2, STEPS = 3 };
static const int64_t SIZES[NP] = {29, 5};
static const char* NAMES[NP] = {"layer.weight", "layer.bias"};

static float init_value(int p, size_t e) {
  uint64_t s = ((uint64_t)p << 32) ^ e ^ 0x57a7eull;
  return (float)th_uniform(&s);
}

static float grad_value(int rank, int p, size_t e, int step) {
  return (float)((int)((rank + 2) * 5 + p * 7 + (int)e * 3 + step * 13) % 64 - 32) / 8.0f;
}

static fsdp_unit_t make_unit(fsdp_context_t ctx, const char* prefix, int frozen) {
  char names[NP][64];
  const char* ptrs[NP];
  const int trainable[NP] = {!frozen, !frozen};
  for (int i = 0; i < NP; ++i) {
    snprintf(names[i], sizeof names[i], "%s%s", prefix, NAMES[i]);
    ptrs[i] = names[i];
  }
  return th_unit_1d(ctx, NP, ptrs, SIZES, trainable, init_value);
}

typedef struct {
  float p[NP][64], m[NP][64], v[NP][64], vmax[NP][64];
} ref_t;

static void train(fsdp_unit_t u, fsdp_optimizer_t opt, ref_t* r, int first, int last,
                  const fsdp_hyperparams_t* h) {
  const int W = th_size();
  for (int step = first; step < last; ++step) {
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
    for (int i = 0; i < NP; ++i) {
      float* g = NULL;
      CHECK_OK(fsdp_grad_data(u, i, (void**)&g));
      for (int64_t e = 0; e < SIZES[i]; ++e) g[e] = grad_value(th_rank(), i, (size_t)e, step);
    }
    CHECK_OK(fsdp_reduce_grads(u));
    CHECK_OK(fsdp_optimizer_step(opt));
    for (int i = 0; i < NP; ++i) {
      float g[64];
      for (int64_t e = 0; e < SIZES[i]; ++e) {
        float sum = 0.0f;
        for (int k = 0; k < W; ++k) sum += grad_value(k, i, (size_t)e, step);
        g[e] = sum / (float)W;
      }
      ref_adamw_step_flags(r->p[i], r->m[i], r->v[i], r->vmax[i], g, (size_t)SIZES[i], step + 1,
                           h->lr, h->weight_decay, h->beta1, h->beta2, (float)h->eps, h->amsgrad,
                           h->maximize);
    }
  }
}

/* Elements of `buf` (laid out as the gradient shard) that differ from the reference's slices. */
static int differing(fsdp_unit_t u, const float* buf, float (*want)[64]) {
  int bad = 0;
  for (int i = 0; i < NP; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    for (size_t k = 0; k < len; ++k) bad += memcmp(&buf[so + k], &want[i][po + k], 4) != 0;
  }
  return bad;
}

static void run(fsdp_context_t ctx, const char* path) {
  fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  h.lr = 0.01, h.weight_decay = 0.1, h.beta1 = 0.8, h.beta2 = 0.95;
  fsdp_unit_t u = make_unit(ctx, "", 0);
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 1, &u, &opt));
  int64_t steps = -1;
  CHECK_OK(fsdp_optimizer_steps(opt, u, &steps));
  CHECK(steps == 0);
  ref_t ref;
  memset(&ref, 0, sizeof ref);
  for (int i = 0; i < NP; ++i)
    for (int64_t e = 0; e < SIZES[i]; ++e) ref.p[i][e] = init_value(i, (size_t)e);
  train(u, opt, &ref, 0, STEPS, &h);

  float *m = NULL, *v = NULL;
  size_t n = 0, grad_n = 0;
  CHECK_OK(fsdp_optimizer_state(opt, u, "exp_avg", (void**)&m, &n));
  CHECK_OK(fsdp_optimizer_state(opt, u, "exp_avg_sq", (void**)&v, NULL));
  CHECK_OK(fsdp_shard_grad(u, NULL, &grad_n));
  CHECK_MSG(n == grad_n, "a state buffer is laid out like the gradient shard");
  CHECK_MSG(differing(u, m, ref.m) == 0, "exp_avg equals the non-sharded reference bit for bit");
  CHECK_MSG(differing(u, v, ref.v) == 0, "exp_avg_sq equals the reference bit for bit");
  CHECK_OK(fsdp_optimizer_steps(opt, u, &steps));
  CHECK(steps == STEPS);

  /* Restore by hand: state and count written from outside, as a converter does. */
  for (int i = 0; i < NP; ++i)
    for (int64_t e = 0; e < SIZES[i]; ++e) {
      ref.m[i][e] = (float)(i + 1) * 0.125f * (float)(e % 7) - 0.25f;
      ref.v[i][e] = (float)(e % 5 + 1) * 0.0625f;
    }
  for (int i = 0; i < NP; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    memcpy(&m[so], &ref.m[i][po], len * 4);
    memcpy(&v[so], &ref.v[i][po], len * 4);
  }
  CHECK_OK(fsdp_optimizer_set_steps(opt, u, 41));
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));

  /* Bad input changes nothing. */
  fsdp_unit_t other = make_unit(ctx, "other.", 0), frozen = make_unit(ctx, "frozen.", 1);
  fsdp_optimizer_t opt2 = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 1, &frozen, &opt2));
  void* p = &n;
  CHECK_FAILS(fsdp_optimizer_state(opt, u, NULL, &p, NULL), FSDP_ERR_INVALID_ARGUMENT, "name");
  CHECK_FAILS(fsdp_optimizer_state(opt, u, "momentum", &p, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "'momentum'");
  CHECK_FAILS(fsdp_optimizer_state(opt, other, "exp_avg", &p, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "not updated by");
  CHECK_FAILS(fsdp_optimizer_state(opt2, frozen, "exp_avg", &p, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "frozen");
  CHECK_FAILS(fsdp_optimizer_state(NULL, u, "exp_avg", &p, NULL), FSDP_ERR_INVALID_HANDLE, "opt");
  CHECK_FAILS(fsdp_optimizer_steps(opt, u, NULL), FSDP_ERR_INVALID_ARGUMENT, "steps");
  CHECK_FAILS(fsdp_optimizer_steps(opt, other, &steps), FSDP_ERR_INVALID_ARGUMENT, "unit");
  CHECK_FAILS(fsdp_optimizer_set_steps(opt, u, -1), FSDP_ERR_INVALID_ARGUMENT, "steps = -1");
  CHECK_FAILS(fsdp_optimizer_set_steps(opt, other, 2), FSDP_ERR_INVALID_ARGUMENT, "unit");
  CHECK_MSG(p == (void*)&n, "a refused call leaves its outputs alone");
  CHECK_OK(fsdp_optimizer_steps(opt, u, &steps));
  CHECK(steps == 41);
  CHECK_OK(fsdp_optimizer_destroy(&opt2));
  CHECK_OK(fsdp_unit_destroy(&frozen));
  CHECK_OK(fsdp_unit_destroy(&other));
  CHECK_OK(fsdp_optimizer_destroy(&opt));

  /* A fresh optimizer loads what was written, and steps on from it as the reference does. */
  fsdp_optimizer_t fresh = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 1, &u, &fresh));
  o.optimizers = &fresh;
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &o, NULL));
  CHECK_OK(fsdp_optimizer_steps(fresh, u, &steps));
  CHECK_MSG(steps == 41, "the step count set by hand was saved and loaded");
  CHECK_OK(fsdp_optimizer_state(fresh, u, "exp_avg", (void**)&m, NULL));
  CHECK_OK(fsdp_optimizer_state(fresh, u, "exp_avg_sq", (void**)&v, NULL));
  CHECK_MSG(differing(u, m, ref.m) == 0 && differing(u, v, ref.v) == 0,
            "the state written by hand was saved and loaded bit for bit");
  train(u, fresh, &ref, 41, 42, &h);
  float* shard = NULL;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, NULL));
  CHECK_MSG(differing(u, shard, ref.p) == 0 && differing(u, m, ref.m) == 0,
            "step 42 from the restored state equals the reference's");
  CHECK_OK(fsdp_optimizer_destroy(&fresh));
  CHECK_OK(fsdp_unit_destroy(&u));
}

/* AMSGrad and maximize through a checkpoint: the hyperparameters and max_exp_avg_sq are saved
 * and loaded into an optimizer created without them, which then steps on as the reference does;
 * a file saved without AMSGrad (`plain`) loaded into an optimizer that has its buffer zeroes it
 * (PyTorch's state from such a file has none) and turns amsgrad off as the file says. */
static void amsgrad_checkpoint(fsdp_context_t ctx, const char* path, const char* plain) {
  fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  h.lr = 0.01, h.weight_decay = 0.1, h.beta1 = 0.8, h.beta2 = 0.5, h.amsgrad = 1, h.maximize = 1;
  fsdp_unit_t u = make_unit(ctx, "", 0);
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 1, &u, &opt));
  ref_t ref;
  memset(&ref, 0, sizeof ref);
  for (int i = 0; i < NP; ++i)
    for (int64_t e = 0; e < SIZES[i]; ++e) ref.p[i][e] = init_value(i, (size_t)e);
  train(u, opt, &ref, 0, STEPS, &h);
  float* vmax = NULL;
  CHECK_OK(fsdp_optimizer_state(opt, u, "max_exp_avg_sq", (void**)&vmax, NULL));
  CHECK_MSG(differing(u, vmax, ref.vmax) == 0, "max_exp_avg_sq equals the reference bit for bit");
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&u));

  fsdp_hyperparams_t plain_h = FSDP_ADAMW_DEFAULTS;
  u = make_unit(ctx, "", 0);
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &plain_h, 1, &u, &opt));
  o.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &o, NULL));
  fsdp_hyperparams_t got = FSDP_ADAMW_DEFAULTS;
  CHECK_OK(fsdp_optimizer_get_hyperparams(opt, 0, &got));
  CHECK_MSG(got.amsgrad == 1 && got.maximize == 1 && got.beta2 == 0.5,
            "the file's amsgrad and maximize are loaded");
  CHECK_OK(fsdp_optimizer_state(opt, u, "max_exp_avg_sq", (void**)&vmax, NULL));
  CHECK_MSG(differing(u, vmax, ref.vmax) == 0, "max_exp_avg_sq was saved and loaded bit for bit");
  train(u, opt, &ref, STEPS, STEPS + 2, &h);
  float* shard = NULL;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, NULL));
  CHECK_MSG(differing(u, shard, ref.p) == 0 && differing(u, vmax, ref.vmax) == 0,
            "two AMSGrad steps from the loaded state equal the reference's");

  CHECK_OK(fsdp_checkpoint_load(ctx, plain, &o, NULL));
  CHECK_OK(fsdp_optimizer_get_hyperparams(opt, 0, &got));
  CHECK_MSG(got.amsgrad == 0 && got.maximize == 0, "a file without amsgrad turns it off");
  int zero = 1;
  size_t n = 0;
  CHECK_OK(fsdp_optimizer_state(opt, u, "max_exp_avg_sq", (void**)&vmax, &n));
  for (size_t k = 0; k < n; ++k) zero &= vmax[k] == 0.0f;
  CHECK_MSG(zero, "a file without max_exp_avg_sq zeroes the buffer");
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&u));

  if (th_rank() == 0) {
    size_t len = 0;
    CHECK_OK(fsdp_checkpoint_describe(path, NULL, 0, &len));
    char* json = malloc(len + 1);
    CHECK_OK(fsdp_checkpoint_describe(path, json, len + 1, NULL));
    CHECK(strstr(json, "\"amsgrad\":true,\"maximize\":true") != NULL);
    CHECK(strstr(json, "\"max_exp_avg_sq\":{\"layer.bias\":{\"step\":3}") != NULL);
    free(json);
  }
}

static void describe(const char* path) {
  size_t len = 0;
  CHECK_OK(fsdp_checkpoint_describe(path, NULL, 0, &len));
  char* json = malloc(len + 1);
  CHECK_OK(fsdp_checkpoint_describe(path, json, len + 1, NULL));
  CHECK(strlen(json) == len);
  CHECK(strstr(json, "{\"name\":\"layer.bias\",\"dtype\":\"float32\",\"shape\":[5]}") != NULL);
  CHECK(strstr(json, "{\"name\":\"layer.weight\",\"dtype\":\"float32\",\"shape\":[29]}") != NULL);
  CHECK(strstr(json, "\"kind\":\"adamw\"") != NULL);
  CHECK(strstr(json, "\"beta1\":0.80000000000000004,\"beta2\":0.94999999999999996") != NULL);
  CHECK(strstr(json,
               "\"exp_avg_sq\":{\"layer.bias\":{\"step\":41},\"layer.weight\":{\"step\":41}}") !=
        NULL);
  char world[64];
  snprintf(world, sizeof world, "\"world_size\":%d,", th_size());
  CHECK(strstr(json, world) != NULL);
  CHECK(strstr(json, "\"grad_scaler\":null") != NULL);

  char small[8] = "keep";
  CHECK_FAILS(fsdp_checkpoint_describe(path, small, sizeof small, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "capacity = 8");
  CHECK_MSG(strcmp(small, "keep") == 0, "a buffer too small is left untouched");
  CHECK_FAILS(fsdp_checkpoint_describe(NULL, json, len + 1, NULL), FSDP_ERR_INVALID_ARGUMENT,
              "path");
  CHECK_FAILS(fsdp_checkpoint_describe("", json, len + 1, NULL), FSDP_ERR_INVALID_ARGUMENT, "path");
  CHECK_FAILS(fsdp_checkpoint_describe("/nonexistent/x.h5", json, len + 1, &len), FSDP_ERR_IO,
              "/nonexistent/x.h5");
  free(json);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_optimizer_state");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  char path[256];
  snprintf(path, sizeof path, "optimizer_state_np%d.h5", th_size());
  char amsgrad[256];
  snprintf(amsgrad, sizeof amsgrad, "optimizer_state_amsgrad_np%d.h5", th_size());
  run(ctx, path);
  if (th_rank() == 0) describe(path);
  amsgrad_checkpoint(ctx, amsgrad, path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (th_rank() == 0) remove(path), remove(amsgrad);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
