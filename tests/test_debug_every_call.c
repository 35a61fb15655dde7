/* FSDP_DEBUG=1 alone (cfg.debug_collectives = 0, FSDP_DEBUG_COLLECTIVES unset) turns debug mode's
 * comparison of collective calls on, and every collective entry point of a context is compared
 * (2 ranks): rank 0 makes the call while rank 1 makes another collective on the same context
 * (fsdp_begin_forward; fsdp_begin_backward against fsdp_begin_forward). Both fail with
 * FSDP_ERR_MISMATCH, each naming the call rank 0 made, and nothing ran: no handle was written,
 * the units keep their state, and the same calls made in agreement afterwards work. A missed
 * call would hang instead: FSDP_TIMEOUT bounds that wait. fsdp_optimizer_step is collective only
 * with HFSDP (test_hfsdp); a plan (fsdp_plan_*) has no context and no collective call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { N = 64 };

struct state {
  fsdp_context_t ctx;
  fsdp_unit_t sharded, unsharded; /* unsharded: holds a gradient written on every rank */
  fsdp_optimizer_t opt;
  fsdp_grad_scaler_t scaler;
  const char* path;
};

/* The collective calls, by the name a mismatch reports. */
static const char* const calls[] = {
    "fsdp_unit_create",
    "fsdp_unit_create",
    "fsdp_unit_tie",
    "fsdp_unshard",
    "fsdp_unshard_async",
    "fsdp_reduce_grads",
    "fsdp_reduce_grads_async",
    "fsdp_gather_params",
    "fsdp_begin_forward",
    "fsdp_begin_backward",
    "fsdp_broadcast",
    "fsdp_allreduce",
    "fsdp_optimizer_create",
    "fsdp_optimizer_add_group",
    "fsdp_clip_grad_norm",
    "fsdp_grad_scaler_create",
    "fsdp_grad_scaler_unscale",
    "fsdp_grad_scaler_step",
    "fsdp_checkpoint_save",
    "fsdp_checkpoint_save_async",
    "fsdp_checkpoint_load",
};
enum { NCALLS = sizeof calls / sizeof calls[0] };

/* Call k; what it would have made is written to *made (it must stay NULL). */
static fsdp_status_t call(int k, struct state* s, void** made) {
  static const int64_t shape[1] = {N};
  const fsdp_param_desc_t d = {"v", 1, shape, FSDP_FLOAT32, 1};
  fsdp_hyperparams_t hp = FSDP_SGD_DEFAULTS;
  char bytes[8] = {0};
  double value = 1.0;
  void* values[1] = {NULL};
  switch (k) {
    case 0: return fsdp_unit_create(s->ctx, 1, &d, NULL, (fsdp_unit_t*)made);
    case 1: return fsdp_unit_create_ex(s->ctx, 1, &d, NULL, NULL, (fsdp_unit_t*)made);
    case 2: return fsdp_unit_tie(s->unsharded, "alias", s->sharded, 0, NULL);
    case 3: return fsdp_unshard(s->sharded);
    case 4: return fsdp_unshard_async(s->sharded, (fsdp_request_t*)made);
    case 5: return fsdp_reduce_grads(s->unsharded);
    case 6: return fsdp_reduce_grads_async(s->unsharded, (fsdp_request_t*)made);
    case 7: {
      float out[N];
      values[0] = out;
      return fsdp_gather_params(s->sharded, values);
    }
    case 8: return fsdp_begin_forward(s->ctx);
    case 9: return fsdp_begin_backward(s->ctx);
    case 10: return fsdp_broadcast(s->ctx, FSDP_GROUP_WORLD, 0, bytes, sizeof bytes);
    case 11: return fsdp_allreduce(s->ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, &value, 1);
    case 12:
      return fsdp_optimizer_create(s->ctx, FSDP_OPTIMIZER_SGD, NULL, 1, &s->sharded,
                                   (fsdp_optimizer_t*)made);
    case 13: return fsdp_optimizer_add_group(s->opt, "v", &hp, NULL, NULL);
    case 14: return fsdp_clip_grad_norm(s->ctx, 1.0, 2.0, NULL);
    case 15:
      return fsdp_grad_scaler_create(s->ctx, 1024.0, 2.0, 0.5, 10, (fsdp_grad_scaler_t*)made);
    case 16: return fsdp_grad_scaler_unscale(s->scaler, s->opt);
    case 17: return fsdp_grad_scaler_step(s->scaler, s->opt, NULL);
    case 18: return fsdp_checkpoint_save(s->ctx, s->path, NULL);
    case 19: return fsdp_checkpoint_save_async(s->ctx, s->path, NULL, (fsdp_request_t*)made);
    case 20: return fsdp_checkpoint_load(s->ctx, s->path, NULL, NULL);
  }
  return FSDP_ERR_INTERNAL;
}

static int is_sharded(fsdp_unit_t u) {
  void* p = NULL;
  return fsdp_param_data(u, 0, &p) == FSDP_ERR_STATE;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_debug_every_call");
  if (th_size() != 2) {
    if (th_rank() == 0) fprintf(stderr, "test_debug_every_call needs 2 ranks\n");
    return th_finish() ? 1 : 77;
  }
  setenv("FSDP_DEBUG", "1", 1);
  unsetenv("FSDP_DEBUG_COLLECTIVES");
  setenv("FSDP_TIMEOUT", "60", 1);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.debug_collectives = 0; /* FSDP_DEBUG alone turns the comparison on */
  struct state s = {NULL, NULL, NULL, NULL, NULL, "debug_every_call.h5"};
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &s.ctx));
  float a[N], b[N];
  for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = (float)-i;
  const int64_t shape[1] = {N};
  const fsdp_param_desc_t d = {"v", 1, shape, FSDP_FLOAT32, 1};
  const void* ia[1] = {a};
  const void* ib[1] = {b};
  CHECK_OK(fsdp_unit_create(s.ctx, 1, &d, ia, &s.sharded));
  CHECK_OK(fsdp_unit_create(s.ctx, 1, &d, ib, &s.unsharded));
  CHECK_OK(fsdp_unshard(s.unsharded));
  void* g = NULL;
  CHECK_OK(fsdp_grad_data(s.unsharded, 0, &g));
  for (int i = 0; i < N; ++i) ((float*)g)[i] = (float)(th_rank() + 1);
  CHECK_OK(fsdp_optimizer_create(s.ctx, FSDP_OPTIMIZER_SGD, NULL, 1, &s.unsharded, &s.opt));
  CHECK_OK(fsdp_grad_scaler_create(s.ctx, 1024.0, 2.0, 0.5, 10, &s.scaler));

  for (int k = 0; k < NCALLS; ++k) {
    void* made = NULL;
    fsdp_status_t rc;
    if (th_rank() == 0)
      rc = call(k, &s, &made);
    else
      rc = k == 8 ? fsdp_begin_backward(s.ctx) : fsdp_begin_forward(s.ctx);
    char detail[200];
    snprintf(detail, sizeof detail, "%s (status %d): %s", calls[k], (int)rc, fsdp_last_error());
    CHECK_MSG(rc == FSDP_ERR_MISMATCH, detail);
    CHECK_MSG(strstr(fsdp_last_error(), calls[k]) != NULL, detail);
    CHECK_MSG(strstr(fsdp_last_error(), "ranks made different collective calls") != NULL, detail);
    CHECK_MSG(made == NULL, detail);
    CHECK_MSG(is_sharded(s.sharded) && !is_sharded(s.unsharded), detail);
  }
  /* Nothing ran: no tie, the gradient still pending, and the agreeing calls run. */
  int nparams = 0;
  CHECK_OK(fsdp_unit_info(s.unsharded, &nparams, NULL));
  CHECK_MSG(nparams == 1, "no tie was made");
  CHECK_OK(fsdp_reduce_grads(s.unsharded));
  size_t offset = 0, param_offset = 0, count = 0, numel = 0;
  void* shard = NULL;
  CHECK_OK(fsdp_param_shard_range(s.unsharded, 0, &offset, &param_offset, &count));
  CHECK_OK(fsdp_shard_grad(s.unsharded, &shard, &numel));
  for (size_t i = 0; i < count; ++i) /* the mean of 1 and 2 */
    CHECK_MSG(((float*)shard)[offset + i] == 1.5f, "the gradient reduced once");
  CHECK_OK(fsdp_unshard(s.sharded));
  void* p = NULL;
  CHECK_OK(fsdp_param_data(s.sharded, 0, &p));
  CHECK(memcmp(p, a, sizeof a) == 0);
  CHECK_OK(fsdp_reshard(s.sharded));

  CHECK_OK(fsdp_grad_scaler_destroy(&s.scaler));
  CHECK_OK(fsdp_optimizer_destroy(&s.opt));
  CHECK_OK(fsdp_unit_destroy(&s.sharded));
  CHECK_OK(fsdp_reshard(s.unsharded));
  CHECK_OK(fsdp_unit_destroy(&s.unsharded));
  CHECK_OK(fsdp_finalize(&s.ctx));
  return th_finish();
}
