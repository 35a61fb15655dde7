/* The FSDP_* variables that must be the same on every rank (doc/environment.md) are compared by
 * fsdp_init: a rank that differs makes every rank fail with FSDP_ERR_MISMATCH naming the
 * variable (or the configuration it sets), and no context is made; a variable local to each rank
 * may differ. The reference is the table in doc/environment.md, which tests/check_environment.sh
 * compares with the library's. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* Sets `name` to `value` on the last rank only, then calls fsdp_init. */
static fsdp_status_t init_with_last_rank(const char* name, const char* value, fsdp_context_t* ctx) {
  if (th_rank() == th_size() - 1) setenv(name, value, 1);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  const fsdp_status_t st = fsdp_init(MPI_COMM_WORLD, &cfg, ctx);
  unsetenv(name);
  return st;
}

static void must_agree(const char* name, const char* value) {
  fsdp_context_t ctx = NULL;
  CHECK_FAILS(init_with_last_rank(name, value, &ctx), FSDP_ERR_MISMATCH, name);
  CHECK(ctx == NULL);
}

static void may_differ(const char* name, const char* value) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(init_with_last_rank(name, value, &ctx));
  CHECK(ctx != NULL);
  CHECK_OK(fsdp_finalize(&ctx));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_environment");
  must_agree("FSDP_CKPT_METADATA", "collective");
  must_agree("FSDP_CKPT_ALIGNMENT", "65536");
  must_agree("FSDP_CKPT_ROMIO_CB", "enable");
  must_agree("FSDP_RANKS_PER_NODE", "1");
  /* FSDP_DEBUG turns on the comparison of collective calls (cfg->debug_collectives), which the
   * configurations' comparison refuses first. */
  fsdp_context_t ctx = NULL;
  CHECK_FAILS(init_with_last_rank("FSDP_DEBUG", "1", &ctx), FSDP_ERR_MISMATCH,
              "configurations (cfg and FSDP_* environment) differ");
  CHECK(ctx == NULL);
  may_differ("FSDP_PROGRESS_THREAD", "0");
  /* The same value everywhere is fine. */
  setenv("FSDP_CKPT_METADATA", "collective", 1);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  CHECK_OK(fsdp_finalize(&ctx));
  unsetenv("FSDP_CKPT_METADATA");
  return th_finish();
}
