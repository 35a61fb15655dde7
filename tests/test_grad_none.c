/* Parameters without a gradient (fsdp_grad_set_none, PyTorch's p.grad = None) are skipped by the
 * library's optimizers as torch.optim skips them:
 *  - over 6 steps with a schedule of skipped parameters (one in the middle of the unit, one at its
 *    start, one never), each rank's shard and state equal a non-sharded reference (ref_optim.h)
 *    that keeps a count and state per parameter and leaves a skipped one alone (no weight decay,
 *    no moment decay) bit for bit, for AdamW and for SGD with momentum (whose buffer starts as
 *    the gradient at a parameter's first update, however late);
 *  - each parameter's count (fsdp_optimizer_param_steps) is the number of steps that took it, the
 *    unit's (fsdp_optimizer_steps) the largest;
 *  - the marked parameter's part of the gradient shard reads zero; fsdp_grad_none reads the marks;
 *    every gradient is None after fsdp_zero_grads (a step then changes nothing) until a reduction
 *    or fsdp_shard_grad; none = 0 on a zeroed shard gives that parameter alone a zero gradient
 *    (SGD's weight decay then moves it, as torch.optim's zero_grad(set_to_none=False) would);
 *  - a checkpoint keeps each parameter's count: a fresh optimizer loads them and its next step
 *    equals the reference's;
 *  - bad input (an index out of range, a frozen parameter, NULL, a negative count) is refused
 *    naming the argument and changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref_optim.h"

enum { NP = 4, STEPS = 6 };
static const int64_t SIZES[NP] = {13, 21, 6, 9};
static const char* NAMES[NP] = {"a.weight", "b.weight", "b.bias", "frozen"};
static const int TRAINABLE[NP] = {1, 1, 1, 0};

/* Whether parameter p has no gradient at step s (0-based). */
static int skipped(int p, int s) {
  return (p == 1 && (s == 1 || s == 2)) || (p == 0 && (s == 0 || s == 4));
}

static float init_value(int p, size_t e) {
  uint64_t s = ((uint64_t)p << 32) ^ e ^ 0x9e37ull;
  return (float)th_uniform(&s);
}

static float grad_value(int rank, int p, size_t e, int step) {
  return (float)((int)((rank + 3) * 5 + p * 11 + (int)e * 7 + step * 3) % 64 - 32) / 16.0f;
}

typedef struct {
  float p[NP][64], m[NP][64], v[NP][64];
  int t[NP];
} ref_t;

static fsdp_unit_t make_unit(fsdp_context_t ctx) {
  return th_unit_1d(ctx, NP, NAMES, SIZES, TRAINABLE, init_value);
}

static void ref_init(ref_t* r) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < NP; ++i)
    for (int64_t e = 0; e < SIZES[i]; ++e) r->p[i][e] = init_value(i, (size_t)e);
}

/* Elements of `buf` (shard layout) that differ from the reference's slices of parameters < n. */
static int differing(fsdp_unit_t u, const float* buf, float (*want)[64], int n) {
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    for (size_t k = 0; k < len; ++k) bad += memcmp(&buf[so + k], &want[i][po + k], 4) != 0;
  }
  return bad;
}

static void one_step(fsdp_unit_t u, fsdp_optimizer_t opt, ref_t* r, int step, int adamw,
                     const fsdp_hyperparams_t* h) {
  const int W = th_size();
  CHECK_OK(fsdp_optimizer_zero_grad(opt));
  for (int i = 0; i < NP; ++i) {
    if (!TRAINABLE[i]) continue;
    float* g = NULL;
    CHECK_OK(fsdp_grad_data(u, i, (void**)&g));
    for (int64_t e = 0; e < SIZES[i]; ++e) g[e] = grad_value(th_rank(), i, (size_t)e, step);
  }
  CHECK_OK(fsdp_reduce_grads(u));
  for (int i = 0; i < NP; ++i)
    if (skipped(i, step)) CHECK_OK(fsdp_grad_set_none(u, i, 1));
  int none[NP];
  CHECK_OK(fsdp_grad_none(u, none, NP));
  float* grad = NULL;
  CHECK_OK(fsdp_shard_grad(u, (void**)&grad, NULL));
  for (int i = 0; i < NP; ++i) {
    CHECK(none[i] == (skipped(i, step) || !TRAINABLE[i]));
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, i, &so, &po, &len));
    for (size_t k = 0; skipped(i, step) && k < len; ++k)
      CHECK_MSG(grad[so + k] == 0.0f, "a parameter marked without gradient reads zero");
  }
  CHECK_OK(fsdp_optimizer_step(opt));
  for (int i = 0; i < NP; ++i) {
    if (!TRAINABLE[i] || skipped(i, step)) continue;
    float g[64];
    for (int64_t e = 0; e < SIZES[i]; ++e) {
      float sum = 0.0f;
      for (int k = 0; k < W; ++k) sum += grad_value(k, i, (size_t)e, step);
      g[e] = sum / (float)W;
    }
    ++r->t[i];
    if (adamw)
      ref_adamw_step(r->p[i], r->m[i], r->v[i], g, (size_t)SIZES[i], r->t[i], h->lr,
                     h->weight_decay, h->beta1, h->beta2, (float)h->eps);
    else
      ref_sgd_step(r->p[i], r->m[i], g, (size_t)SIZES[i], r->t[i] == 1, (float)h->lr,
                   (float)h->weight_decay, (float)h->momentum, (float)h->dampening, h->nesterov);
  }
}

static void check_against(fsdp_unit_t u, fsdp_optimizer_t opt, ref_t* r, int adamw,
                          const char* when) {
  float *shard = NULL, *m = NULL, *v = NULL;
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, NULL));
  CHECK_OK(fsdp_optimizer_state(opt, u, adamw ? "exp_avg" : "momentum", (void**)&m, NULL));
  if (adamw) CHECK_OK(fsdp_optimizer_state(opt, u, "exp_avg_sq", (void**)&v, NULL));
  const int bad = differing(u, shard, r->p, NP) + differing(u, m, r->m, NP - 1) +
                  (adamw ? differing(u, v, r->v, NP - 1) : 0);
  if (bad) fprintf(stderr, "rank %d: %s: %d elements differ\n", th_rank(), when, bad);
  CHECK_MSG(bad == 0, "shard and state equal the per-parameter reference bit for bit");
  int64_t most = 0;
  for (int i = 0; i < NP; ++i) {
    int64_t steps = -1;
    CHECK_OK(fsdp_optimizer_param_steps(opt, u, i, &steps));
    CHECK_MSG(steps == r->t[i], "each parameter's count is the steps that took it");
    if (steps > most) most = steps;
  }
  int64_t steps = -1;
  CHECK_OK(fsdp_optimizer_steps(opt, u, &steps));
  CHECK_MSG(steps == most, "the unit's count is its parameters' largest");
}

static void run_kind(fsdp_context_t ctx, int adamw, const char* path) {
  const fsdp_hyperparams_t adamw_defaults = FSDP_ADAMW_DEFAULTS, sgd_defaults = FSDP_SGD_DEFAULTS;
  fsdp_hyperparams_t h = adamw ? adamw_defaults : sgd_defaults;
  h.lr = 0.05, h.weight_decay = 0.1;
  if (adamw)
    h.beta1 = 0.8, h.beta2 = 0.95;
  else
    h.momentum = 0.9, h.dampening = 0.25;
  const fsdp_optimizer_kind_t kind = adamw ? FSDP_OPTIMIZER_ADAMW : FSDP_OPTIMIZER_SGD;
  fsdp_unit_t u = make_unit(ctx);
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, kind, &h, 1, &u, &opt));
  ref_t ref;
  ref_init(&ref);
  for (int s = 0; s < STEPS - 1; ++s) one_step(u, opt, &ref, s, adamw, &h);
  check_against(u, opt, &ref, adamw, "after the scheduled skips");

  /* After fsdp_zero_grads every gradient is None: a step changes nothing. */
  int none[NP];
  CHECK_OK(fsdp_zero_grads(u));
  CHECK_OK(fsdp_grad_none(u, none, NP));
  CHECK_MSG(none[0] && none[1] && none[2] && none[3], "fsdp_zero_grads: every gradient is None");
  CHECK_OK(fsdp_optimizer_step(opt));
  check_against(u, opt, &ref, adamw, "a step after fsdp_zero_grads");
  /* none = 0 on the zeroed shard: parameter 2 alone has a (zero) gradient and is updated. */
  CHECK_OK(fsdp_grad_set_none(u, 2, 0));
  CHECK_OK(fsdp_grad_none(u, none, NP));
  CHECK_MSG(none[0] && none[1] && !none[2] && none[3], "none = 0 gives one parameter its gradient");
  CHECK_OK(fsdp_optimizer_step(opt));
  {
    const float zeros[64] = {0};
    ++ref.t[2];
    if (adamw)
      ref_adamw_step(ref.p[2], ref.m[2], ref.v[2], zeros, (size_t)SIZES[2], ref.t[2], h.lr,
                     h.weight_decay, h.beta1, h.beta2, (float)h.eps);
    else
      ref_sgd_step(ref.p[2], ref.m[2], zeros, (size_t)SIZES[2], ref.t[2] == 1, (float)h.lr,
                   (float)h.weight_decay, (float)h.momentum, (float)h.dampening, h.nesterov);
  }
  check_against(u, opt, &ref, adamw, "a step with one zero gradient");

  /* Bad input changes nothing. */
  CHECK_OK(fsdp_grad_set_none(u, 0, 1));
  int marks[NP];
  CHECK_OK(fsdp_grad_none(u, marks, NP));
  CHECK_FAILS(fsdp_grad_set_none(u, NP, 1), FSDP_ERR_OUT_OF_RANGE, "index = 4");
  CHECK_FAILS(fsdp_grad_set_none(u, -1, 1), FSDP_ERR_OUT_OF_RANGE, "index = -1");
  CHECK_FAILS(fsdp_grad_set_none(u, 3, 1), FSDP_ERR_INVALID_ARGUMENT, "'frozen'");
  CHECK_FAILS(fsdp_grad_set_none(NULL, 0, 1), FSDP_ERR_INVALID_HANDLE, "unit");
  CHECK_FAILS(fsdp_grad_none(u, NULL, NP), FSDP_ERR_INVALID_ARGUMENT, "none");
  CHECK_FAILS(fsdp_grad_none(u, none, NP - 1), FSDP_ERR_INVALID_ARGUMENT, "count = 3");
  int64_t steps = -7;
  CHECK_FAILS(fsdp_optimizer_param_steps(opt, u, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, "steps");
  CHECK_FAILS(fsdp_optimizer_param_steps(opt, u, NP, &steps), FSDP_ERR_OUT_OF_RANGE, "index");
  CHECK_FAILS(fsdp_optimizer_set_param_steps(opt, u, 0, -1), FSDP_ERR_INVALID_ARGUMENT,
              "steps = -1");
  CHECK_FAILS(fsdp_optimizer_set_param_steps(opt, u, 3, 2), FSDP_ERR_INVALID_ARGUMENT, "'frozen'");
  CHECK_MSG(steps == -7, "a refused call leaves its output alone");
  CHECK_OK(fsdp_grad_none(u, none, NP));
  CHECK_MSG(memcmp(none, marks, sizeof none) == 0, "refused calls leave the marks as they were");
  check_against(u, opt, &ref, adamw, "after refused calls");
  CHECK_OK(fsdp_grad_set_none(u, 0, 0));

  /* The per-parameter counts survive a checkpoint; the next step equals the reference's. */
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &o));
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  fsdp_optimizer_t fresh = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, kind, &h, 1, &u, &fresh));
  o.optimizers = &fresh;
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &o, NULL));
  check_against(u, fresh, &ref, adamw, "loaded");
  one_step(u, fresh, &ref, STEPS - 1, adamw, &h);
  check_against(u, fresh, &ref, adamw, "the step after the load");

  /* Set by hand, as a converter restores counts. */
  CHECK_OK(fsdp_optimizer_set_param_steps(fresh, u, 2, 17));
  CHECK_OK(fsdp_optimizer_param_steps(fresh, u, 2, &steps));
  CHECK(steps == 17);
  CHECK_OK(fsdp_optimizer_steps(fresh, u, &steps));
  CHECK(steps == 17);
  CHECK_OK(fsdp_optimizer_destroy(&fresh));
  CHECK_OK(fsdp_unit_destroy(&u));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_grad_none");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  char path[256];
  snprintf(path, sizeof path, "test_grad_none_%d.h5", th_size());
  run_kind(ctx, 1, path);
  run_kind(ctx, 0, path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (th_rank() == 0) remove(path);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
