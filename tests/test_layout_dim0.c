/* The dim-0 unit layout (FSDP_LAYOUT_DIM0, PyTorch FSDP2's per-parameter sharding), checked
 * against references computed here, independently of the library:
 *  - each rank's part of each parameter (fsdp_param_shard_range) and the shard's size follow
 *    fsdp.h's formula, recomputed here from the shapes, and the shard holds the initial values
 *    there and zeros elsewhere (initial values, an init callback, sync_from_rank0);
 *  - an unshard gives every parameter whole at its place, bit for bit (also asynchronously, and in
 *    bfloat16 where the values are exact in it); fsdp_gather_params gives them too;
 *  - a reduce leaves each rank the sum of every rank's gradient at its part (integer-valued
 *    gradients, W times an integer, so the mean is exact), zeros elsewhere;
 *  - a unit of the flat layout holding the same values, given the same gradients and stepped by
 *    the same AdamW, ends bit for bit equal to the dim-0 unit (the arithmetic is element-wise, so
 *    the layout must not change a bit); a checkpoint of either loads into the other;
 *  - bad input: a layout out of range is refused naming options->layout, ranks that disagree on
 *    it are refused on every rank (MISMATCH), and nothing is created.
 * Run on full and hybrid contexts (th_run_full_and_hybrid), under each transport (CMake sets
 * FSDP_TRANSPORT) and with emulated nodes (FSDP_RANKS_PER_NODE). argv[1]: a checkpoint path
 * prefix. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NP 6
static const char* names[NP] = {"w", "b", "s", "f", "t", "e"};
static const int ndims[NP] = {2, 1, 0, 2, 3, 2};
static const int64_t shapes[NP][3] = {{7, 5}, {3}, {0}, {4, 4}, {10, 2, 3}, {1, 9}};
static const int trainable[NP] = {1, 1, 1, 0, 1, 0};
static const char* ckpt_prefix = "layout_dim0";

static size_t numel_of(int p) {
  size_t n = 1;
  for (int d = 0; d < ndims[p]; ++d) n *= (size_t)shapes[p][d];
  return n;
}
static size_t align8(size_t n) {
  return (n + 7) / 8 * 8;
}
/* d0 (1 for a scalar) and the rows a rank holds at most: fsdp.h's c = ceil(d0 / F). */
static size_t d0_of(int p) {
  return ndims[p] ? (size_t)shapes[p][0] : 1;
}
static size_t rows_of(int p, int f) {
  return (d0_of(p) + (size_t)f - 1) / (size_t)f;
}

/* Exact in float32 and in bfloat16 (multiples of 1/4 below 8). */
static float init_value(int p, size_t e) {
  return (float)((p * 13 + (int)e * 7) % 31) / 4.0f;
}
/* Rank r's gradient of element e of parameter p in round k, divided by the world size: a small
 * integer, different each round (so that AdamW's state matters). */
static int grad_round = 0;
static int grad_unit(int r, int p, size_t e) {
  return (r + 1) * (int)((e + (size_t)p + (size_t)grad_round) % 5) - 3 + grad_round % 3;
}

static void fill_descs(fsdp_param_desc_t* d) {
  for (int p = 0; p < NP; ++p) {
    d[p].name = names[p];
    d[p].ndim = ndims[p];
    d[p].shape = ndims[p] ? shapes[p] : NULL;
    d[p].dtype = FSDP_FLOAT32;
    d[p].requires_grad = trainable[p];
  }
}

static float* values[NP];
static void make_values(void) {
  for (int p = 0; p < NP; ++p) {
    values[p] = malloc(numel_of(p) * sizeof(float));
    for (size_t e = 0; e < numel_of(p); ++e) values[p][e] = init_value(p, e);
  }
}

static int init_cb(void* user, int index, const fsdp_param_desc_t* desc, void* data) {
  (void)user;
  (void)desc;
  memcpy(data, values[index], numel_of(index) * sizeof(float));
  return 0;
}

enum source { FROM_VALUES, FROM_CALLBACK, FROM_RANK0 };

static fsdp_unit_t make_unit(fsdp_context_t ctx, int64_t layout, enum source src,
                             fsdp_dtype_t param_dtype) {
  fsdp_param_desc_t d[NP];
  fill_descs(d);
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.layout = layout;
  o.param_dtype = param_dtype;
  const void* init[NP];
  for (int p = 0; p < NP; ++p) init[p] = values[p];
  if (src == FROM_CALLBACK) o.init = init_cb;
  if (src == FROM_RANK0) o.sync_from_rank0 = 1;
  /* sync_from_rank0: the other ranks' values must not count, so they pass none */
  const int none = src == FROM_CALLBACK || (src == FROM_RANK0 && th_rank() != 0);
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, NP, d, none ? NULL : init, &o, &u));
  return u;
}

/* The shard follows fsdp.h's formula: parts, their offsets, the block sizes and the values. */
static void check_shard(fsdp_context_t ctx, fsdp_unit_t u) {
  int f = 0, r = 0, replicas = 0;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &r, &f));
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_REPLICATE, NULL, &replicas));
  /* Hybrid sharding rounds the trainable block up to N pieces of a multiple of 8. */
  size_t block[2] = {0, 0}, offset_in_block[NP];
  for (int p = 0; p < NP; ++p) {
    const int k = trainable[p] ? 0 : 1;
    offset_in_block[p] = block[k];
    block[k] += align8(rows_of(p, f) * (numel_of(p) / d0_of(p)));
  }
  const size_t pieces = (size_t)replicas;
  const size_t trainable_block = align8((block[0] + pieces - 1) / pieces) * pieces;
  size_t shard_numel = 0;
  float* shard = NULL;
  CHECK_OK(fsdp_unit_numel(u, NULL, NULL, &shard_numel));
  CHECK_MSG(shard_numel == trainable_block + block[1], "shard size = fsdp.h's formula");
  CHECK_OK(fsdp_shard_data(u, (void**)&shard, NULL));
  char* covered = calloc(shard_numel, 1);
  for (int p = 0; p < NP; ++p) {
    const size_t row = numel_of(p) / d0_of(p), c = rows_of(p, f);
    const size_t first = (size_t)r * c;
    const size_t held = first >= d0_of(p) ? 0 : (d0_of(p) - first < c ? d0_of(p) - first : c);
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, p, &so, &po, &len));
    CHECK_MSG(len == held * row, names[p]);
    if (!len || len != held * row) continue;
    CHECK_MSG(po == first * row, names[p]);
    CHECK_MSG(so == (trainable[p] ? 0 : trainable_block) + offset_in_block[p], names[p]);
    int same = 1;
    for (size_t e = 0; e < len && so + e < shard_numel; ++e) {
      same &= shard[so + e] == values[p][po + e];
      covered[so + e] = 1;
    }
    CHECK_MSG(same, "the shard holds the parameter's rows");
  }
  int zero = 1;
  for (size_t e = 0; e < shard_numel; ++e)
    if (!covered[e]) zero &= shard[e] == 0.0f;
  CHECK_MSG(zero, "padding is zero");
  free(covered);
}

static float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* Unsharded, every parameter is whole at its place. */
static void check_unsharded(fsdp_unit_t u, int bf16, int async) {
  if (async) {
    fsdp_request_t req = NULL;
    CHECK_OK(fsdp_unshard_async(u, &req));
    CHECK_OK(fsdp_wait(&req));
  } else {
    CHECK_OK(fsdp_unshard(u));
  }
  for (int p = 0; p < NP; ++p) {
    void* data = NULL;
    CHECK_OK(fsdp_param_data(u, p, &data));
    if (!data) continue;
    int same = 1;
    for (size_t e = 0; e < numel_of(p); ++e)
      same &= (bf16 ? bf16_to_float(((uint16_t*)data)[e]) : ((float*)data)[e]) == values[p][e];
    CHECK_MSG(same, names[p]);
  }
  CHECK_OK(fsdp_reshard(u));
}

#define check_gather_params(u, expect) check_gather_params_at((u), (expect), __LINE__)
static void check_gather_params_at(fsdp_unit_t u, float* const* expect, int line) {
  float* out[NP];
  for (int p = 0; p < NP; ++p) out[p] = calloc(numel_of(p), sizeof(float));
  CHECK_OK(fsdp_gather_params(u, (void* const*)out));
  for (int p = 0; p < NP; ++p) {
    size_t first = numel_of(p);
    for (size_t e = numel_of(p); e-- > 0;)
      if (memcmp(&out[p][e], &expect[p][e], sizeof(float)) != 0) first = e;
    char what[160];
    snprintf(what, sizeof what, "%s: element %zu is %.9g, expected %.9g (line %d)", names[p], first,
             first < numel_of(p) ? out[p][first] : 0.0,
             first < numel_of(p) ? expect[p][first] : 0.0, line);
    CHECK_MSG(first == numel_of(p), what);
    free(out[p]);
  }
}

/* Writes W * grad_unit(r, p, e) into every trainable parameter's full gradient (bfloat16 for a
 * unit computing in it: these small integers are exact there too). */
static void write_grads(fsdp_unit_t u, int bf16) {
  const float w = (float)th_size();
  CHECK_OK(fsdp_unshard(u));
  for (int p = 0; p < NP; ++p) {
    if (!trainable[p]) continue;
    void* g = NULL;
    CHECK_OK(fsdp_grad_data(u, p, &g));
    if (!g) continue;
    for (size_t e = 0; e < numel_of(p); ++e) {
      const float x = w * (float)grad_unit(th_rank(), p, e);
      uint32_t bits;
      memcpy(&bits, &x, sizeof bits);
      if (bf16)
        ((uint16_t*)g)[e] = (uint16_t)(bits >> 16);
      else
        ((float*)g)[e] = x;
    }
  }
  CHECK_OK(fsdp_reshard(u));
  CHECK_OK(fsdp_reduce_grads(u));
}

/* The gradient shard: the sum over ranks of grad_unit at this rank's parts, zero elsewhere. */
static void check_grad_shard(fsdp_unit_t u) {
  float* g = NULL;
  size_t n = 0;
  CHECK_OK(fsdp_shard_grad(u, (void**)&g, &n));
  if (!g) return;
  char* covered = calloc(n, 1);
  for (int p = 0; p < NP; ++p) {
    if (!trainable[p]) continue;
    size_t so = 0, po = 0, len = 0;
    CHECK_OK(fsdp_param_shard_range(u, p, &so, &po, &len));
    int same = 1;
    for (size_t e = 0; e < len && so + e < n; ++e) {
      int sum = 0;
      for (int r = 0; r < th_size(); ++r) sum += grad_unit(r, p, po + e);
      same &= g[so + e] == (float)sum;
      covered[so + e] = 1;
    }
    CHECK_MSG(same, names[p]);
  }
  int zero = 1;
  for (size_t e = 0; e < n; ++e)
    if (!covered[e]) zero &= g[e] == 0.0f;
  CHECK_MSG(zero, "the gradient shard's padding is zero");
  free(covered);
}

static fsdp_optimizer_t adamw(fsdp_context_t ctx, fsdp_unit_t u) {
  fsdp_hyperparams_t h = FSDP_ADAMW_DEFAULTS;
  h.lr = 0.01;
  h.weight_decay = 0.1;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, &h, 1, &u, &opt));
  return opt;
}

static float** gathered(fsdp_unit_t u) {
  float** out = malloc(NP * sizeof(float*));
  for (int p = 0; p < NP; ++p) out[p] = calloc(numel_of(p), sizeof(float));
  CHECK_OK(fsdp_gather_params(u, (void* const*)out));
  return out;
}

static void free_params(float** a) {
  for (int p = 0; p < NP; ++p) free(a[p]);
  free(a);
}

/* Two steps of the same AdamW on a dim-0 and a flat unit; then a checkpoint of `saved` (the
 * layout stepped first) loads into a fresh unit of the other layout. */
static void check_against_flat(fsdp_context_t ctx, int64_t saved) {
  static int round = 0;
  char path[512];
  fsdp_checkpoint_options_t with_opt = FSDP_CHECKPOINT_OPTIONS_INIT;
  with_opt.noptimizers = 1;
  snprintf(path, sizeof path, "%s.%d.%d.h5", ckpt_prefix, th_size(), round++);
  fsdp_unit_t u = make_unit(ctx, saved, FROM_VALUES, FSDP_DTYPE_AUTO);
  fsdp_optimizer_t opt = adamw(ctx, u);
  for (int step = 0; step < 2; ++step) {
    grad_round = step;
    write_grads(u, 0);
    CHECK_OK(fsdp_optimizer_step(opt));
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
  }
  float** after = gathered(u);
  with_opt.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_save(ctx, path, &with_opt));
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&u));
  /* The other layout, stepped the same way: bit for bit the same values. */
  const int64_t other = getenv("SAME_LAYOUT")
                            ? saved
                            : (saved == FSDP_LAYOUT_DIM0 ? FSDP_LAYOUT_FLAT : FSDP_LAYOUT_DIM0);
  fsdp_unit_t v = make_unit(ctx, other, FROM_VALUES, FSDP_DTYPE_AUTO);
  opt = adamw(ctx, v);
  for (int step = 0; step < 2; ++step) {
    grad_round = step;
    write_grads(v, 0);
    CHECK_OK(fsdp_optimizer_step(opt));
    CHECK_OK(fsdp_optimizer_zero_grad(opt));
  }
  check_gather_params(v, after);
  /* Then one more step on both from the checkpoint: the optimizer state came across too. */
  grad_round = 2;
  write_grads(v, 0);
  CHECK_OK(fsdp_optimizer_step(opt));
  float** continued = gathered(v);
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&v));
  fsdp_unit_t w = make_unit(ctx, other, FROM_VALUES, FSDP_DTYPE_AUTO);
  opt = adamw(ctx, w);
  with_opt.optimizers = &opt;
  CHECK_OK(fsdp_checkpoint_load(ctx, path, &with_opt, NULL));
  check_gather_params(w, after);
  int64_t steps = 0;
  CHECK_OK(fsdp_optimizer_steps(opt, w, &steps));
  CHECK_MSG(steps == 2, "the optimizer's state loaded");
  write_grads(w, 0);
  CHECK_OK(fsdp_optimizer_step(opt));
  check_gather_params(w, continued);
  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&w));
  free_params(after);
  free_params(continued);
  grad_round = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (th_rank() == 0) remove(path);
}

static void check_bad_input(fsdp_context_t ctx) {
  fsdp_param_desc_t d[NP];
  fill_descs(d);
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  fsdp_unit_t u = NULL;
  o.layout = FSDP_UNIT_LAYOUT_COUNT;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, NP, d, NULL, &o, &u), FSDP_ERR_INVALID_ARGUMENT,
              "options->layout");
  CHECK(u == NULL);
  o.layout = -1;
  CHECK_FAILS(fsdp_unit_create_ex(ctx, NP, d, NULL, &o, &u), FSDP_ERR_INVALID_ARGUMENT,
              "options->layout");
  if (th_size() > 1) {
    o.layout = th_rank() == 0 ? FSDP_LAYOUT_DIM0 : FSDP_LAYOUT_FLAT;
    CHECK_FAILS(fsdp_unit_create_ex(ctx, NP, d, NULL, &o, &u), FSDP_ERR_MISMATCH,
                "fsdp_unit_create_ex");
    CHECK(u == NULL);
  }
  /* An older caller's struct (size up to sync_from_rank0) gets the flat layout. */
  o.layout = FSDP_LAYOUT_DIM0;
  o.size = offsetof(fsdp_unit_options_t, layout);
  CHECK_OK(fsdp_unit_create_ex(ctx, NP, d, NULL, &o, &u));
  size_t so = 0, po = 0, len = 0;
  int f = 0, r = 0;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &r, &f));
  CHECK_OK(fsdp_param_shard_range(u, 4, &so, &po, &len)); /* "t": 60 elements after w, b, s */
  const size_t flat_t = align8(align8(align8(35) + 3) + 1);
  const size_t block = align8((flat_t + 60 + (size_t)f - 1) / (size_t)f);
  CHECK_MSG(f > 1 || len == 60, "flat layout");
  CHECK_MSG(f == 1 || po == 0 || po + flat_t == (size_t)r * block, "flat layout");
  CHECK_OK(fsdp_unit_destroy(&u));
}

static void run(fsdp_context_t ctx) {
  for (int src = FROM_VALUES; src <= FROM_RANK0; ++src) {
    fsdp_unit_t u = make_unit(ctx, FSDP_LAYOUT_DIM0, (enum source)src, FSDP_DTYPE_AUTO);
    if (!u) continue;
    check_shard(ctx, u);
    int f = 0, zero_copy = -1;
    CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, NULL, &f));
    CHECK_OK(fsdp_unit_zero_copy(u, &zero_copy));
    CHECK_MSG(f == 1 || zero_copy == 0, "a dim-0 unit never keeps its shard in place");
    check_unsharded(u, 0, src == FROM_CALLBACK);
    check_gather_params(u, values);
    write_grads(u, 0);
    check_grad_shard(u);
    CHECK_OK(fsdp_unit_destroy(&u));
  }
  fsdp_unit_t half = make_unit(ctx, FSDP_LAYOUT_DIM0, FROM_VALUES, FSDP_BFLOAT16);
  if (half) {
    check_unsharded(half, 1, 0);
    check_unsharded(half, 1, 1);
    write_grads(half, 1); /* float32 gradients rounded to bfloat16: W * small integers are exact */
    check_grad_shard(half);
    CHECK_OK(fsdp_unit_destroy(&half));
  }
  check_against_flat(ctx, FSDP_LAYOUT_DIM0);
  check_against_flat(ctx, FSDP_LAYOUT_FLAT);
  check_bad_input(ctx);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_layout_dim0");
  if (argc > 1) ckpt_prefix = argv[1];
  make_values();
  th_run_full_and_hybrid(run);
  for (int p = 0; p < NP; ++p) free(values[p]);
  return th_finish();
}
