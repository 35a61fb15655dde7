/* The C example (`make demo`): a 6-layer MLP, one unit per layer, trained on a synthetic
 * regression task across the ranks, the way a real loop uses libfsdp: hybrid sharding (each unit
 * sharded over groups of F ranks, replicated across the groups), bfloat16 compute over a float32
 * master, two micro-batches per step with the first accumulated without communication, forward
 * and backward prefetch with asynchronous gradient reductions on the progress thread, gradient
 * clipping, and the library's sharded AdamW (no weight decay on biases). Matrix products go
 * through CBLAS (OpenBLAS on Debian). Each rank then reports which part of every parameter it
 * holds and its memory against an unsharded replica. Exits non-zero if any call fails or the loss
 * does not fall by half.
 *
 *   mpiexec -n 4 fsdp_mlp [--shard-factor F] [--save FILE] [--resume FILE]
 * F defaults to 2 (1 on an odd number of ranks). --save writes a checkpoint after training (model,
 * AdamW state, the final loss as metadata); --resume loads one first, on any number of ranks and
 * any F (`make demo` saves on 4 ranks, F = 2, and resumes on 2): training then continues from the
 * saved loss instead of starting over. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"

enum { LAYERS = 6, BATCH = 16, MICRO = 2, STEPS = 40, MAXW = 64 };
static const int widths[LAYERS + 1] = {16, 64, 64, 64, 64, 64, 4};

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
  s ^= s << 7; /* xorshift must not start from 0 */
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
  int provided = 0; /* MPI_THREAD_MULTIPLE: the context gets a progress thread for the overlap */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  const char *save_path = NULL, *resume_path = NULL;
  int factor = world % 2 == 0 ? 2 : 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (strcmp(argv[i], "--save") == 0)
      save_path = argv[++i];
    else if (strcmp(argv[i], "--resume") == 0)
      resume_path = argv[++i];
    else if (strcmp(argv[i], "--shard-factor") == 0)
      factor = atoi(argv[++i]);
  }

  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = FSDP_HYBRID_SHARD; /* shard over F ranks, replicate over world / F */
  cfg.sharding_factor = factor;     /* checked by fsdp_init: 1 <= F, F divides the world */
  cfg.param_dtype = FSDP_BFLOAT16;  /* unsharded parameters and gradients in bfloat16 */
  cfg.reduce_dtype = FSDP_FLOAT32;  /* gradients communicated in float32 */
  fsdp_context_t ctx = NULL;
  TRY(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));

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
  fsdp_optimizer_t opt = NULL;
  fsdp_hyperparams_t adamw = FSDP_ADAMW_DEFAULTS;
  adamw.lr = 3e-3;
  TRY(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &adamw, LAYERS, units, &opt));
  fsdp_hyperparams_t no_decay = adamw;
  no_decay.weight_decay = 0.0;
  TRY(fsdp_optimizer_add_group(opt, "*.bias", &no_decay, NULL, NULL));
  TRY(fsdp_set_prefetch(ctx, 1, 1));

  fsdp_checkpoint_options_t ckpt = FSDP_CHECKPOINT_OPTIONS_INIT;
  ckpt.noptimizers = 1, ckpt.optimizers = &opt;
  float saved_loss = 0.0f;
  if (resume_path) {
    char text[32] = "";
    TRY(fsdp_checkpoint_metadata(resume_path, "loss", text, sizeof text, NULL));
    saved_loss = strtof(text, NULL);
    TRY(fsdp_checkpoint_load(ctx, resume_path, &ckpt, NULL));
    if (rank == 0)
      printf("resumed %s on %d ranks, F = %d (saved at loss %.5f)\n", resume_path, world, factor,
             saved_loss);
  }

  float *act[LAYERS + 1], *dact[LAYERS + 1], *target = malloc(sizeof(float) * BATCH * 4);
  for (int l = 0; l <= LAYERS; ++l) {
    act[l] = malloc(sizeof(float) * BATCH * (size_t)widths[l]);
    dact[l] = malloc(sizeof(float) * BATCH * (size_t)widths[l]);
  }
  /* float copies of one layer's bfloat16 parameters and gradients, for the arithmetic */
  float *w = malloc(sizeof(float) * MAXW * MAXW), *b = malloc(sizeof(float) * MAXW);
  float *gw = malloc(sizeof(float) * MAXW * MAXW), *gb = malloc(sizeof(float) * MAXW);

  float first_loss = 0.0f, loss = 0.0f;
  double norm = 0.0;
  for (int step = 0; step < STEPS; ++step) {
    float local = 0.0f;
    TRY(fsdp_begin_forward(ctx)); /* prefetch follows last iteration's order */
    for (int micro = 0; micro < MICRO; ++micro) {
      TRY(fsdp_set_grad_sync(ctx, micro == MICRO - 1)); /* communicate once per step */
      make_batch(rank, step * MICRO + micro, act[0], target);
      /* Forward: one layer unsharded at a time (the next one is being prefetched). */
      for (int l = 0; l < LAYERS; ++l) {
        const int in = widths[l], out = widths[l + 1];
        void *pw, *pb;
        TRY(fsdp_unshard(units[l]));
        TRY(fsdp_param_data(units[l], 0, &pw));
        TRY(fsdp_param_data(units[l], 1, &pb));
        TRY(fsdp_convert(w, FSDP_FLOAT32, pw, FSDP_BFLOAT16, (size_t)(in * out)));
        TRY(fsdp_convert(b, FSDP_FLOAT32, pb, FSDP_BFLOAT16, (size_t)out));
        TRY(fsdp_reshard(units[l]));
        /* z = act[l] w^T + b, [BATCH, out], then tanh except on the last layer */
        for (int n = 0; n < BATCH; ++n) memcpy(act[l + 1] + n * out, b, sizeof(float) * out);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BATCH, out, in, 1.0f, act[l], in, w,
                    in, 1.0f, act[l + 1], out);
        if (l + 1 < LAYERS)
          for (int k = 0; k < BATCH * out; ++k) act[l + 1][k] = tanhf(act[l + 1][k]);
      }
      for (int k = 0; k < BATCH * widths[LAYERS]; ++k) {
        const float e = act[LAYERS][k] - target[k];
        local += 0.5f * e * e / (BATCH * MICRO);
        dact[LAYERS][k] = e / (BATCH * MICRO);
      }
      /* Backward, last layer first: add the gradients into the unit's bfloat16 full gradient,
       * then start its reduction, which overlaps the next layer's backward. */
      TRY(fsdp_begin_backward(ctx));
      for (int l = LAYERS - 1; l >= 0; --l) {
        const int in = widths[l], out = widths[l + 1];
        void *pw, *pgw, *pgb;
        TRY(fsdp_unshard(units[l]));
        TRY(fsdp_param_data(units[l], 0, &pw));
        TRY(fsdp_convert(w, FSDP_FLOAT32, pw, FSDP_BFLOAT16, (size_t)(in * out)));
        TRY(fsdp_grad_data(units[l], 0, &pgw)); /* zero, or the previous micro-batch's */
        TRY(fsdp_grad_data(units[l], 1, &pgb));
        TRY(fsdp_convert(gw, FSDP_FLOAT32, pgw, FSDP_BFLOAT16, (size_t)(in * out)));
        TRY(fsdp_convert(gb, FSDP_FLOAT32, pgb, FSDP_BFLOAT16, (size_t)out));
        /* dact[l + 1] is dloss/dz of this layer: gw += dz^T act[l], gb += sum over the batch of
         * dz, and dloss/dz of the layer below = (dz w) * tanh'. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, BATCH, 1.0f, dact[l + 1], out,
                    act[l], in, 1.0f, gw, in);
        for (int n = 0; n < BATCH; ++n)
          for (int o = 0; o < out; ++o) gb[o] += dact[l + 1][n * out + o];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BATCH, in, out, 1.0f, dact[l + 1],
                    out, w, in, 0.0f, dact[l], in);
        if (l > 0)
          for (int k = 0; k < BATCH * in; ++k) dact[l][k] *= 1.0f - act[l][k] * act[l][k];
        TRY(fsdp_convert(pgw, FSDP_BFLOAT16, gw, FSDP_FLOAT32, (size_t)(in * out)));
        TRY(fsdp_convert(pgb, FSDP_BFLOAT16, gb, FSDP_FLOAT32, (size_t)out));
        TRY(fsdp_reshard(units[l]));
        TRY(fsdp_reduce_grads_async(units[l], NULL)); /* kept locally while sync is off */
      }
    }
    MPI_Allreduce(&local, &loss, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    loss /= (float)world;
    if (step == 0) first_loss = loss;
    TRY(fsdp_clip_grad_norm(ctx, 1.0, 2.0, &norm)); /* waits for the reductions */
    TRY(fsdp_optimizer_step(opt));                  /* every rank updates only its shard */
    TRY(fsdp_optimizer_zero_grad(opt));
    if (rank == 0 && (step % 10 == 0 || step == STEPS - 1))
      printf("step %2d  loss %.5f  grad norm %.4f\n", step, loss, norm);
  }
  int threaded = 0;
  TRY(fsdp_context_async(ctx, &threaded));
  if (rank == 0)
    printf(
        "hybrid sharding F = %d x %d replicas; bfloat16 compute, float32 master; progress "
        "thread %s; prefetch on\n",
        factor, world / factor, threaded ? "on" : "off (MPI not at THREAD_MULTIPLE)");

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
  fsdp_memory_stats_t m;
  m.size = sizeof m;
  TRY(fsdp_memory_stats(ctx, &m));
  /* A non-sharded replica holds float32 parameters, gradients and AdamW's two moments. */
  const size_t sharded = m.shard_bytes + m.grad_shard_bytes + m.optimizer_state_bytes;
  const size_t replica = 4 * m.unsharded_model_bytes;
  snprintf(report + len, sizeof report - (size_t)len,
           "  memory: shards %zu B (params %zu + grads %zu + AdamW state %zu); peak %zu B\n"
           "          non-sharded replica %zu B: %.2fx the shards, %.2fx the peak\n",
           sharded, m.shard_bytes, m.grad_shard_bytes, m.optimizer_state_bytes, m.peak_bytes,
           replica, (double)replica / (double)sharded, (double)replica / (double)m.peak_bytes);
  char* all = rank == 0 ? malloc(sizeof report * (size_t)world) : NULL;
  MPI_Gather(report, sizeof report, MPI_CHAR, all, sizeof report, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < world; ++r) fputs(all + (size_t)r * sizeof report, stdout);
    printf("loss %.5f -> %.5f over %d steps on %d ranks\n", first_loss, loss, STEPS, world);
    free(all);
  }

  if (save_path) {
    char steps[16], loss_text[32];
    snprintf(steps, sizeof steps, "%d", STEPS);
    snprintf(loss_text, sizeof loss_text, "%.6f", loss);
    const char* keys[] = {"steps", "loss"};
    const char* values[] = {steps, loss_text};
    ckpt.nmetadata = 2, ckpt.metadata_keys = keys, ckpt.metadata_values = values;
    TRY(fsdp_checkpoint_save(ctx, save_path, &ckpt));
    if (rank == 0) printf("saved %s on %d ranks\n", save_path, world);
  }

  TRY(fsdp_optimizer_destroy(&opt));
  for (int l = 0; l < LAYERS; ++l) TRY(fsdp_unit_destroy(&units[l]));
  TRY(fsdp_finalize(&ctx));
  for (int l = 0; l <= LAYERS; ++l) free(act[l]), free(dact[l]);
  free(target), free(w), free(b), free(gw), free(gb);
  /* Fresh: the loss falls by half. Resumed: it starts where the saved run ended (not from the
   * untrained loss, tens of times higher) and does not rise. */
  const int ok = resume_path ? first_loss < 2.0f * saved_loss + 1e-3f && loss <= first_loss * 1.5f
                             : loss < 0.5f * first_loss;
  if (rank == 0 && !ok)
    fprintf(stderr, resume_path ? "the resumed run did not continue from the checkpoint\n"
                                : "the loss did not fall by half: training is broken\n");
  MPI_Finalize();
  return ok ? 0 : 1;
}
