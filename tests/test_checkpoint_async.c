/* Asynchronous save: the call copies the state and returns; training goes on changing the
 * parameters and optimizer state while the file is written; the file holds exactly the state at
 * the step the save was taken (checked against the non-sharded reference after loading it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_model.h"

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_checkpoint_async");
  char file[600], bad[600];
  snprintf(file, sizeof file, "%s/async.h5", argc > 1 ? argv[1] : ".");
  snprintf(bad, sizeof bad, "/nonexistent-dir/async.h5");
  fsdp_context_t ctx = cm_context("full");
  cm_model_t m;
  cm_create(ctx, "a", &m);
  for (int t = 1; t <= 2; ++t) cm_step(&m, t);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;
  fsdp_request_t req = NULL;
  CHECK_OK(fsdp_checkpoint_save_async(ctx, file, &o, &req));
  int done = 0;
  CHECK_OK(fsdp_test(req, &done));
  for (int t = 3; t <= 5; ++t) cm_step(&m, t); /* overlaps the write */
  CHECK_OK(fsdp_wait(&req));
  CHECK(req == NULL);
  cm_check(&m, 5, "training during the save");

  /* The file has step 2, not what training did meanwhile. */
  CHECK_OK(fsdp_checkpoint_load(ctx, file, &o, NULL));
  cm_check(&m, 2, "async save, loaded");
  cm_step(&m, 3);
  cm_check(&m, 3, "one step after loading the async save");

  /* A save that fails reports it through the request, on every rank. */
  CHECK_OK(fsdp_checkpoint_save_async(ctx, bad, &o, &req));
  CHECK_FAILS(fsdp_wait(&req), FSDP_ERR_IO, "nonexistent-dir");
  /* Two saves in a row: the second waits for the first. A load waits for a pending save. */
  fsdp_request_t r1 = NULL, r2 = NULL;
  CHECK_OK(fsdp_checkpoint_save_async(ctx, file, &o, &r1));
  cm_step(&m, 4);
  CHECK_OK(fsdp_checkpoint_save_async(ctx, file, &o, &r2));
  cm_step(&m, 5);
  CHECK_OK(fsdp_checkpoint_load(ctx, file, &o, NULL));
  cm_check(&m, 4, "the second of two saves");
  CHECK_OK(fsdp_test(r1, &done));
  CHECK(done == 1);
  CHECK_OK(fsdp_wait(&r1));
  CHECK_OK(fsdp_wait(&r2));
  /* A pending save at finalize is completed, not lost. */
  CHECK_OK(fsdp_checkpoint_save_async(ctx, file, &o, &r1));
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));

  ctx = cm_context("full");
  cm_create(ctx, "b", &m);
  o.optimizers = &m.opt;
  CHECK_OK(fsdp_checkpoint_load(ctx, file, &o, NULL));
  cm_check(&m, 4, "saved while finalizing");
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
