/* The quick-start demo (`make demo`): a 3-layer MLP, one unit per layer, trained with SGD on a
 * synthetic regression task across the ranks. Each layer follows the FSDP cycle: unshard for the
 * forward pass, reshard; unshard again for the backward pass, write the gradients, reduce them,
 * reshard; then the optimizer updates only this rank's shard. Each rank then reports which part
 * of every parameter it holds and its memory against an unsharded (DDP-style) replica.
 * Exits non-zero if any call fails or the loss does not fall. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

enum { LAYERS = 6, BATCH = 32, STEPS = 40 };
static const int widths[LAYERS + 1] = {16, 64, 64, 64, 64, 64, 4};
static const float learning_rate = 0.05f;

#define TRY(call)                                                                                 \
  do {                                                                                            \
    fsdp_status_t s_ = (call);                                                                    \
    if (s_ != FSDP_SUCCESS) {                                                                     \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, fsdp_status_string(s_), fsdp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                               \
    }                                                                                             \
  } while (0)

static float uniform(unsigned long long* s) { /* xorshift64*, in [-1, 1) */
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* Synthetic task: targets from a fixed random "teacher" applied to random inputs. */
static void make_batch(int rank, int step, float* x, float* t) {
  unsigned long long s = 0x9e3779b97f4a7c15ull ^ (unsigned long long)(rank * 1000003 + step + 1);
  unsigned long long teacher = 12345;
  static float tw[4 * 16];
  for (int i = 0; i < 4 * 16; ++i) tw[i] = uniform(&teacher) * 0.5f;
  for (int n = 0; n < BATCH; ++n) {
    for (int i = 0; i < widths[0]; ++i) x[n * widths[0] + i] = uniform(&s);
    for (int o = 0; o < widths[LAYERS]; ++o) {
      float z = 0.0f;
      for (int i = 0; i < widths[0]; ++i) z += tw[o * 16 + i] * x[n * widths[0] + i];
      t[n * widths[LAYERS] + o] = sinf(z);
    }
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, NULL, &ctx)); /* full sharding over all ranks */

  /* One unit per layer: {weight [out, in], bias [out]}, same initial values on every rank. */
  fsdp_unit_t units[LAYERS];
  char names[LAYERS][2][32];
  int64_t shapes[LAYERS][2][2];
  unsigned long long init_seed = 7;
  for (int l = 0; l < LAYERS; ++l) {
    const int in = widths[l], out = widths[l + 1];
    snprintf(names[l][0], 32, "layer%d.weight", l);
    snprintf(names[l][1], 32, "layer%d.bias", l);
    shapes[l][0][0] = out, shapes[l][0][1] = in, shapes[l][1][0] = out;
    fsdp_param_desc_t d[2] = {{names[l][0], 2, shapes[l][0], FSDP_FLOAT32, 1},
                              {names[l][1], 1, shapes[l][1], FSDP_FLOAT32, 1}};
    float *w = malloc(sizeof(float) * (size_t)(in * out)), *b = calloc((size_t)out, sizeof(float));
    for (int i = 0; i < in * out; ++i) w[i] = uniform(&init_seed) * sqrtf(3.0f / (float)in);
    const void* init[2] = {w, b};
    TRY(fsdp_unit_create(ctx, 2, d, init, &units[l]));
    free(w);
    free(b);
  }

  float *act[LAYERS + 1], *dact[LAYERS + 1], *target = malloc(sizeof(float) * BATCH * 4);
  for (int l = 0; l <= LAYERS; ++l) {
    act[l] = malloc(sizeof(float) * BATCH * (size_t)widths[l]);
    dact[l] = malloc(sizeof(float) * BATCH * (size_t)widths[l]);
  }

  float first_loss = 0.0f, loss = 0.0f;
  for (int step = 0; step < STEPS; ++step) {
    make_batch(rank, step, act[0], target);
    /* Forward: one layer unsharded at a time. */
    for (int l = 0; l < LAYERS; ++l) {
      const int in = widths[l], out = widths[l + 1];
      float *w, *b;
      TRY(fsdp_unshard(units[l]));
      TRY(fsdp_param_data(units[l], 0, (void**)&w));
      TRY(fsdp_param_data(units[l], 1, (void**)&b));
      for (int n = 0; n < BATCH; ++n)
        for (int o = 0; o < out; ++o) {
          float z = b[o];
          for (int i = 0; i < in; ++i) z += w[o * in + i] * act[l][n * in + i];
          act[l + 1][n * out + o] = l + 1 < LAYERS ? tanhf(z) : z;
        }
      TRY(fsdp_reshard(units[l]));
    }
    float local = 0.0f;
    for (int k = 0; k < BATCH * widths[LAYERS]; ++k) {
      const float e = act[LAYERS][k] - target[k];
      local += 0.5f * e * e / BATCH;
      dact[LAYERS][k] = e / BATCH;
    }
    MPI_Allreduce(&local, &loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    loss /= (float)world;
    if (step == 0) first_loss = loss;
    if (rank == 0 && (step % 10 == 0 || step == STEPS - 1))
      printf("step %2d  loss %.5f\n", step, loss);

    /* Backward, last layer first: unshard, gradients into the full buffer, reduce, reshard. */
    for (int l = LAYERS - 1; l >= 0; --l) {
      const int in = widths[l], out = widths[l + 1];
      float *w, *gw, *gb;
      TRY(fsdp_zero_grads(units[l]));
      TRY(fsdp_unshard(units[l]));
      TRY(fsdp_param_data(units[l], 0, (void**)&w));
      TRY(fsdp_grad_data(units[l], 0, (void**)&gw));
      TRY(fsdp_grad_data(units[l], 1, (void**)&gb));
      for (int n = 0; n < BATCH; ++n) {
        for (int o = 0; o < out; ++o) {
          const float d = dact[l + 1][n * out + o];
          gb[o] += d;
          for (int i = 0; i < in; ++i) gw[o * in + i] += d * act[l][n * in + i];
        }
        for (int i = 0; i < in; ++i) {
          float d = 0.0f;
          for (int o = 0; o < out; ++o) d += w[o * in + i] * dact[l + 1][n * out + o];
          dact[l][n * in + i] = l > 0 ? d * (1.0f - act[l][n * in + i] * act[l][n * in + i]) : d;
        }
      }
      TRY(fsdp_reduce_grads(units[l])); /* mean over all ranks, into this rank's shard */
      TRY(fsdp_reshard(units[l]));
      /* SGD on the shard: every rank updates only what it holds. */
      float *p, *g;
      size_t n = 0;
      TRY(fsdp_shard_data(units[l], (void**)&p, &n));
      TRY(fsdp_shard_grad(units[l], (void**)&g, NULL));
      for (size_t k = 0; k < n; ++k) p[k] -= learning_rate * g[k];
    }
  }

  /* What this rank holds, and its memory against an unsharded replica (parameters + gradients). */
  char report[4096];
  int len = snprintf(report, sizeof report, "rank %d holds:\n", rank);
  for (int l = 0; l < LAYERS; ++l)
    for (int i = 0; i < 2; ++i) {
      size_t po = 0, n = 0, total = 0;
      TRY(fsdp_param_shard_range(units[l], i, NULL, &po, &n));
      TRY(fsdp_param_numel(units[l], i, &total));
      if (n)
        len += snprintf(report + len, sizeof report - (size_t)len,
                        "  %-14s elements [%5zu, %5zu) of %5zu\n", names[l][i], po, po + n, total);
      else
        len +=
            snprintf(report + len, sizeof report - (size_t)len, "  %-14s nothing\n", names[l][i]);
    }
  fsdp_memory_stats_t m = {sizeof m, 0, 0, 0, 0, 0, 0, 0};
  TRY(fsdp_memory_stats(ctx, &m));
  const size_t sharded = m.shard_bytes + m.grad_shard_bytes, replica = 2 * m.unsharded_model_bytes;
  snprintf(
      report + len, sizeof report - (size_t)len,
      "  memory: shards %zu B (params %zu + grads %zu); peak %zu B (shards + one unit unsharded)\n"
      "          unsharded replica %zu B: %.2fx the shards, %.2fx the peak\n",
      sharded, m.shard_bytes, m.grad_shard_bytes, m.peak_bytes, replica,
      (double)replica / (double)sharded, (double)replica / (double)m.peak_bytes);
  char* all = rank == 0 ? malloc(sizeof report * (size_t)world) : NULL;
  MPI_Gather(report, sizeof report, MPI_CHAR, all, sizeof report, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < world; ++r) fputs(all + (size_t)r * sizeof report, stdout);
    printf("loss %.5f -> %.5f over %d steps on %d ranks\n", first_loss, loss, STEPS, world);
    free(all);
  }

  for (int l = 0; l < LAYERS; ++l) TRY(fsdp_unit_destroy(&units[l]));
  TRY(fsdp_finalize(&ctx));
  for (int l = 0; l <= LAYERS; ++l) free(act[l]), free(dact[l]);
  free(target);
  const int ok = loss < 0.5f * first_loss;
  if (rank == 0 && !ok) fprintf(stderr, "the loss did not fall by half: training is broken\n");
  MPI_Finalize();
  return ok ? 0 : 1;
}
