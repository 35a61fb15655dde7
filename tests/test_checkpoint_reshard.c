/* Resharding on load, and resuming training from a checkpoint.
 *   save <file> <strategy> <grouping> <steps>: trains `steps` AdamW steps, saves model,
 *     optimizer and metadata.
 *   load <file> <strategy> <grouping>: loads it (any rank count, strategy, unit grouping),
 *     checks every parameter bit for bit against the non-sharded reference at the saved step,
 *     then trains one more step and checks again: the optimizer state (moments and step counts)
 *     came back exactly, so training continues as if uninterrupted. A file written before 0.14
 *     holds steps in the AdamW arithmetic of then (ref_optim.h), the step after load today's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_model.h"

static void save(const char* file, const char* strategy, const char* grouping, int steps) {
  fsdp_context_t ctx = cm_context(strategy);
  cm_model_t m;
  cm_create(ctx, grouping, &m);
  for (int t = 1; t <= steps; ++t) cm_step(&m, t);
  char step_text[16];
  snprintf(step_text, sizeof step_text, "%d", steps);
  const char* keys[] = {"step", "note"};
  const char* values[] = {step_text, "saved by test_checkpoint_reshard"};
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;
  o.nmetadata = 2, o.metadata_keys = keys, o.metadata_values = values;
  CHECK_OK(fsdp_checkpoint_save(ctx, file, &o));
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Whether libfsdp wrote `file` before 0.14 (fsdp_checkpoint_describe's "library_version"). */
static int written_before_0_14(const char* file) {
  static char json[65536];
  CHECK_OK(fsdp_checkpoint_describe(file, json, sizeof json, NULL));
  const char* v = strstr(json, "\"library_version\"");
  int major = 0, minor = 0;
  CHECK_MSG(v && sscanf(v, "\"library_version\" : \"%d.%d", &major, &minor) == 2,
            "the checkpoint names the library version that wrote it");
  return major == 0 && minor < 14;
}

static void load(const char* file, const char* strategy, const char* grouping) {
  char text[16] = "";
  size_t len = 0;
  CHECK_OK(fsdp_checkpoint_metadata(file, "step", text, sizeof text, &len));
  CHECK(len == strlen(text));
  const int steps = atoi(text);
  CHECK(steps >= 1);
  fsdp_context_t ctx = cm_context(strategy);
  cm_model_t m;
  cm_create(ctx, grouping, &m);
  fsdp_checkpoint_options_t o = FSDP_CHECKPOINT_OPTIONS_INIT;
  o.noptimizers = 1, o.optimizers = &m.opt;
  fsdp_checkpoint_report_t rep = {sizeof rep};
  CHECK_OK(fsdp_checkpoint_load(ctx, file, &o, &rep));
  CHECK(rep.loaded == CM_NPARAMS && rep.missing == 0 && rep.unexpected == 0);
  const int old_steps = written_before_0_14(file) ? steps : 0;
  cm_check_after(&m, steps, old_steps, "after load");
  cm_step(&m, steps + 1);
  cm_check_after(&m, steps + 1, old_steps, "one step after load");
  cm_destroy(&m);
  CHECK_OK(fsdp_finalize(&ctx));
}

/* Writes each parameter's reference values after `steps` steps as <dir>/<name>.bin (raw
 * little-endian float32), for readers that do not use libfsdp. */
static void reference(const char* dir, int steps) {
  for (int p = 0; th_rank() == 0 && p < CM_NPARAMS; ++p) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s.bin", dir, cm_names[p]);
    FILE* f = fopen(path, "wb");
    CHECK_MSG(f != NULL, path);
    if (!f) continue;
    float* w = cm_reference(p, steps);
    CHECK(fwrite(w, sizeof(float), cm_numel(p), f) == cm_numel(p));
    fclose(f);
    free(w);
  }
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_checkpoint_reshard");
  if (argc >= 4 && strcmp(argv[1], "reference") == 0)
    reference(argv[2], atoi(argv[3]));
  else if (argc >= 6 && strcmp(argv[1], "save") == 0)
    save(argv[2], argv[3], argv[4], atoi(argv[5]));
  else if (argc >= 5 && strcmp(argv[1], "load") == 0)
    load(argv[2], argv[3], argv[4]);
  else
    CHECK_MSG(0,
              "usage: save <file> <strategy> <grouping> <steps> | load <file> <strategy> "
              "<grouping>");
  return th_finish();
}
