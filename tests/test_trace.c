/* Produces a timeline for check_trace.py: two named units through a training step with an
 * asynchronous unshard, a reduce, clipping, an optimizer step and a checkpoint saved and loaded
 * back, under FSDP_TRACE. The Python
 * check reads the files back with its own JSON parser and checks the spans (CTest runs it after
 * this program, on the same directory). */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_trace");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  static const int64_t s_embed[2] = {64, 8}, s_head[1] = {100};
  fsdp_param_desc_t de = {"embed.weight", 2, s_embed, FSDP_FLOAT32, 1};
  fsdp_param_desc_t dh = {"head.weight", 1, s_head, FSDP_FLOAT32, 1};
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  fsdp_unit_t u[2];
  o.name = "embed";
  CHECK_OK(fsdp_unit_create_ex(ctx, 1, &de, NULL, &o, &u[0]));
  o.name = "head \"quoted\"";
  CHECK_OK(fsdp_unit_create_ex(ctx, 1, &dh, NULL, &o, &u[1]));
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, NULL, 2, u, &opt));
  for (int k = 0; k < 2; ++k) {
    fsdp_request_t r = NULL;
    CHECK_OK(fsdp_unshard_async(u[k], &r));
    CHECK_OK(fsdp_wait(&r));
    float* g = NULL;
    CHECK_OK(fsdp_grad_data(u[k], 0, (void**)&g));
    g[0] = 1.0f;
    CHECK_OK(fsdp_reshard(u[k]));
    CHECK_OK(fsdp_reduce_grads(u[k]));
  }
  double norm = 0.0;
  CHECK_OK(fsdp_clip_grad_norm(ctx, 1.0, 2.0, &norm));
  CHECK_OK(fsdp_optimizer_step(opt));
  /* A checkpoint saved and loaded back: the load's phases are spans too. */
  char path[1024];
  snprintf(path, sizeof path, "%s/ckpt.h5", getenv("FSDP_TRACE"));
  fsdp_checkpoint_options_t co = FSDP_CHECKPOINT_OPTIONS_INIT;
  co.noptimizers = 1, co.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &co));
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &co, NULL));
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_finalize(&ctx)); /* writes the files */
  return th_finish();
}
