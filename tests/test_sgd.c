/* A short training loop on shards ends with the same parameters as the same loop without
 * sharding. Model: y = W2 tanh(W1 x + b1) + b2 in float64, two units ({W1, b1} and {W2, b2}),
 * each rank its own batch, loss 0.5 |y - t|^2 averaged over the batch; SGD with weight decay on
 * the matrices only, applied through the per-parameter shard view (fsdp_param_shard_range).
 * The reference runs the whole model on every rank over every rank's batch. Sums are taken in a
 * different order, so parameters agree to a relative 1e-12, not bitwise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { IN = 3, HID = 5, OUT = 2, BATCH = 4, STEPS = 6 };
static const double lr = 0.1, weight_decay = 0.01;

typedef struct {
  double w1[HID * IN], b1[HID], w2[OUT * HID], b2[OUT];
} model_t;

static void batch_of(int r, int step, double x[BATCH][IN], double t[BATCH][OUT]) {
  uint64_t s = 1000u * (uint64_t)r + (uint64_t)step;
  for (int n = 0; n < BATCH; ++n) {
    for (int i = 0; i < IN; ++i) x[n][i] = th_uniform(&s);
    for (int o = 0; o < OUT; ++o) t[n][o] = th_uniform(&s);
  }
}

/* Adds the gradient of the batch-mean loss of (x, t) to g. */
static void backprop(const model_t* m, double x[BATCH][IN], double t[BATCH][OUT], model_t* g) {
  for (int n = 0; n < BATCH; ++n) {
    double h[HID], y[OUT], dy[OUT], dh[HID];
    for (int j = 0; j < HID; ++j) {
      double z = m->b1[j];
      for (int i = 0; i < IN; ++i) z += m->w1[j * IN + i] * x[n][i];
      h[j] = tanh(z);
    }
    for (int o = 0; o < OUT; ++o) {
      y[o] = m->b2[o];
      for (int j = 0; j < HID; ++j) y[o] += m->w2[o * HID + j] * h[j];
      dy[o] = (y[o] - t[n][o]) / BATCH;
    }
    for (int j = 0; j < HID; ++j) {
      dh[j] = 0.0;
      for (int o = 0; o < OUT; ++o) dh[j] += m->w2[o * HID + j] * dy[o];
      dh[j] *= 1.0 - h[j] * h[j];
    }
    for (int o = 0; o < OUT; ++o) {
      g->b2[o] += dy[o];
      for (int j = 0; j < HID; ++j) g->w2[o * HID + j] += dy[o] * h[j];
    }
    for (int j = 0; j < HID; ++j) {
      g->b1[j] += dh[j];
      for (int i = 0; i < IN; ++i) g->w1[j * IN + i] += dh[j] * x[n][i];
    }
  }
}

static void init_model(model_t* m) {
  uint64_t s = 42;
  double* all = (double*)m;
  for (size_t k = 0; k < sizeof *m / sizeof(double); ++k) all[k] = 0.5 * th_uniform(&s);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_sgd");
  const int W = th_size();
  model_t init, ref;
  init_model(&init);
  ref = init;

  /* Reference: plain full-batch SGD over every rank's data. */
  for (int step = 0; step < STEPS; ++step) {
    model_t g;
    memset(&g, 0, sizeof g);
    for (int r = 0; r < W; ++r) {
      double x[BATCH][IN], t[BATCH][OUT];
      batch_of(r, step, x, t);
      backprop(&ref, x, t, &g);
    }
    double *p = (double*)&ref, *gp = (double*)&g;
    for (size_t k = 0; k < sizeof ref / sizeof(double); ++k) {
      const int is_bias = (p + k >= ref.b1 && p + k < ref.b1 + HID) || p + k >= ref.b2;
      p[k] -= lr * (gp[k] / W + (is_bias ? 0.0 : weight_decay * p[k]));
    }
  }

  /* Sharded: two units, each rank only its batch. */
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  const int64_t s_w1[2] = {HID, IN}, s_b1[1] = {HID}, s_w2[2] = {OUT, HID}, s_b2[1] = {OUT};
  fsdp_param_desc_t d0[2] = {{"l1.weight", 2, s_w1, FSDP_FLOAT64, 1},
                             {"l1.bias", 1, s_b1, FSDP_FLOAT64, 1}};
  fsdp_param_desc_t d1[2] = {{"l2.weight", 2, s_w2, FSDP_FLOAT64, 1},
                             {"l2.bias", 1, s_b2, FSDP_FLOAT64, 1}};
  const void *v0[2] = {init.w1, init.b1}, *v1[2] = {init.w2, init.b2};
  fsdp_unit_t units[2] = {NULL, NULL};
  CHECK_OK(fsdp_unit_create(ctx, 2, d0, v0, &units[0]));
  CHECK_OK(fsdp_unit_create(ctx, 2, d1, v1, &units[1]));

  for (int step = 0; step < STEPS; ++step) {
    model_t m, g;
    double *dst[4] = {m.w1, m.b1, m.w2, m.b2}, *gdst[4];
    size_t sizes[4] = {sizeof m.w1, sizeof m.b1, sizeof m.w2, sizeof m.b2};
    for (int u = 0; u < 2; ++u) {
      CHECK_OK(fsdp_zero_grads(units[u]));
      CHECK_OK(fsdp_unshard(units[u]));
      for (int i = 0; i < 2; ++i) {
        void* p = NULL;
        CHECK_OK(fsdp_param_data(units[u], i, &p));
        memcpy(dst[2 * u + i], p, sizes[2 * u + i]);
      }
    }
    memset(&g, 0, sizeof g);
    double x[BATCH][IN], t[BATCH][OUT];
    batch_of(th_rank(), step, x, t);
    backprop(&m, x, t, &g);
    gdst[0] = g.w1, gdst[1] = g.b1, gdst[2] = g.w2, gdst[3] = g.b2;
    for (int u = 0; u < 2; ++u) {
      for (int i = 0; i < 2; ++i) {
        void* p = NULL;
        CHECK_OK(fsdp_grad_data(units[u], i, &p));
        memcpy(p, gdst[2 * u + i], sizes[2 * u + i]);
      }
      CHECK_OK(fsdp_reduce_grads(units[u]));
      CHECK_OK(fsdp_reshard(units[u]));
      /* The optimizer sees the shard through the original parameters' pieces. */
      double *ps = NULL, *gs = NULL;
      CHECK_OK(fsdp_shard_data(units[u], (void**)&ps, NULL));
      CHECK_OK(fsdp_shard_grad(units[u], (void**)&gs, NULL));
      for (int i = 0; i < 2; ++i) {
        size_t so = 0, len = 0;
        CHECK_OK(fsdp_param_shard_range(units[u], i, &so, NULL, &len));
        const double wd = i == 1 ? 0.0 : weight_decay; /* no decay on biases */
        for (size_t e = so; e < so + len; ++e) ps[e] -= lr * (gs[e] + wd * ps[e]);
      }
    }
  }

  double worst = 0.0;
  double* want[4] = {ref.w1, ref.b1, ref.w2, ref.b2};
  size_t counts[4] = {HID * IN, HID, OUT * HID, OUT};
  for (int u = 0; u < 2; ++u) {
    CHECK_OK(fsdp_unshard(units[u]));
    for (int i = 0; i < 2; ++i) {
      double* p = NULL;
      CHECK_OK(fsdp_param_data(units[u], i, (void**)&p));
      for (size_t e = 0; e < counts[2 * u + i]; ++e) {
        const double err = fabs(p[e] - want[2 * u + i][e]) / fmax(1.0, fabs(want[2 * u + i][e]));
        if (err > worst) worst = err;
      }
    }
    CHECK_OK(fsdp_reshard(units[u]));
  }
  CHECK_MSG(worst <= 1e-12, "sharded SGD matches the unsharded reference");
  /* And training moved the parameters: a test that cannot fail would not notice. */
  CHECK(fabs(ref.w1[0] - init.w1[0]) > 1e-6);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
