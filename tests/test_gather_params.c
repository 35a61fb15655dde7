/* fsdp_gather_params, fsdp_broadcast and fsdp_allreduce (0.9): what frameworks need for state
 * dicts, agreements and norms without temporary units.
 *
 * gather: units of float32 masters with bfloat16 compute (the masters, not the rounded copy),
 * trainable and frozen sections, float64, sharded and unsharded, a NULL destination skipped; the
 * reference is the values the units were created from, after an SGD step computed here on them.
 * broadcast: each group, each root, values only the root had. Bad input on one rank fails every
 * rank and changes nothing. allreduce: each group and op against the values every rank of the group
 * contributed (known from the group's size), a NaN on one rank, bad input as for broadcast. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static float value(int p, int e) {
  return (float)((p * 131 + e * 7) % 97) / 97.0f - 0.5f + 1.0f / 3.0f;
}

static void check_gather(fsdp_context_t ctx) {
  /* w trainable (odd size), f frozen, b trainable: two sections. */
  const int64_t n[3] = {301, 57, 13};
  const char* names[3] = {"w", "f", "b"};
  fsdp_param_desc_t d[3];
  float* v[3];
  for (int p = 0; p < 3; ++p) {
    d[p] = (fsdp_param_desc_t){names[p], 1, &n[p], FSDP_FLOAT32, p != 1};
    v[p] = malloc((size_t)n[p] * sizeof(float));
    for (int e = 0; e < n[p]; ++e) v[p][e] = value(p, e);
  }
  fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
  o.param_dtype = FSDP_BFLOAT16;
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create_ex(ctx, 3, d, (const void* const*)v, &o, &u));

  /* One SGD step with a known gradient: masters move by lr * g, exactly in float32. */
  fsdp_hyperparams_t hp = FSDP_SGD_DEFAULTS;
  hp.lr = 0.5;
  fsdp_optimizer_t opt = NULL;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &hp, 1, &u, &opt));
  /* The gradient buffer is bfloat16 (param_dtype): 0.25 is 0x3E80. */
  for (int p = 0; p < 3; p += 2) {
    uint16_t* g = NULL;
    CHECK_OK(fsdp_grad_data(u, p, (void**)&g));
    for (int e = 0; e < n[p]; ++e) g[e] = 0x3E80;
  }
  CHECK_OK(fsdp_reduce_grads(u));
  CHECK_OK(fsdp_optimizer_step(opt));
  for (int p = 0; p < 3; p += 2)
    for (int e = 0; e < n[p]; ++e) v[p][e] -= 0.5f * 0.25f;

  float* out[3];
  for (int p = 0; p < 3; ++p) out[p] = calloc((size_t)n[p], sizeof(float));
  void* const skip_f[3] = {out[0], NULL, out[2]};
  CHECK_OK(fsdp_gather_params(u, skip_f));
  int bad = 0;
  for (int p = 0; p < 3; p += 2) bad += memcmp(out[p], v[p], (size_t)n[p] * sizeof(float)) != 0;
  for (int e = 0; e < n[1]; ++e) bad += out[1][e] != 0.0f;
  CHECK_MSG(bad == 0, "gather: float32 masters after a step, not the bfloat16 copy; NULL skipped");

  CHECK_OK(fsdp_unshard(u)); /* unsharded: the same masters */
  void* const all[3] = {out[0], out[1], out[2]};
  CHECK_OK(fsdp_gather_params(u, all));
  for (int p = 0; p < 3; ++p) bad += memcmp(out[p], v[p], (size_t)n[p] * sizeof(float)) != 0;
  CHECK_MSG(bad == 0, "gather while unsharded, frozen section included");
  CHECK_OK(fsdp_reshard(u));

  CHECK_FAILS(fsdp_gather_params(u, NULL), FSDP_ERR_INVALID_ARGUMENT, "values");
  if (th_size() > 1) /* one rank's bad argument: every rank fails, none hangs */
    CHECK_FAILS(fsdp_gather_params(u, th_rank() == 1 ? NULL : all),
                th_rank() == 1 ? FSDP_ERR_INVALID_ARGUMENT : FSDP_ERR_MISMATCH, "");
  CHECK_FAILS(fsdp_gather_params(NULL, all), FSDP_ERR_INVALID_HANDLE, "unit");

  CHECK_OK(fsdp_optimizer_destroy(&opt));
  CHECK_OK(fsdp_unit_destroy(&u));
  for (int p = 0; p < 3; ++p) free(v[p]), free(out[p]);

  /* float64 masters. */
  const int64_t m = 77;
  double dv[77], dout[77];
  for (int e = 0; e < m; ++e) dv[e] = 1.0 / (e + 3.0);
  const void* dvals[1] = {dv};
  fsdp_param_desc_t dd = {"x", 1, &m, FSDP_FLOAT64, 1};
  CHECK_OK(fsdp_unit_create(ctx, 1, &dd, dvals, &u));
  void* const dptr[1] = {dout};
  CHECK_OK(fsdp_gather_params(u, dptr));
  CHECK_MSG(memcmp(dv, dout, sizeof dv) == 0, "gather: float64 masters");
  CHECK_OK(fsdp_unit_destroy(&u));
}

static void check_broadcast(fsdp_context_t ctx) {
  const fsdp_group_t groups[3] = {FSDP_GROUP_WORLD, FSDP_GROUP_SHARD, FSDP_GROUP_REPLICATE};
  for (int k = 0; k < 3; ++k) {
    int grank = 0, gsize = 0;
    CHECK_OK(fsdp_group_info(ctx, groups[k], &grank, &gsize));
    for (int root = 0; root < gsize; ++root) {
      uint64_t word[3] = {0, 0, 0};
      if (grank == root) word[0] = 0xfeedull + (uint64_t)root, word[1] = 7, word[2] = ~0ull;
      CHECK_OK(fsdp_broadcast(ctx, groups[k], root, word, sizeof word));
      CHECK_MSG(word[0] == 0xfeedull + (uint64_t)root && word[1] == 7 && word[2] == ~0ull,
                "broadcast: every rank of the group has the root's value");
    }
  }
  CHECK_OK(fsdp_broadcast(ctx, FSDP_GROUP_WORLD, 0, NULL, 0));
  int x = 5;
  CHECK_FAILS(fsdp_broadcast(ctx, (fsdp_group_t)9, 0, &x, sizeof x), FSDP_ERR_INVALID_ARGUMENT,
              "group");
  CHECK_FAILS(fsdp_broadcast(ctx, FSDP_GROUP_WORLD, th_size(), &x, sizeof x),
              FSDP_ERR_INVALID_ARGUMENT, "root");
  CHECK_FAILS(fsdp_broadcast(ctx, FSDP_GROUP_WORLD, 0, NULL, 4), FSDP_ERR_INVALID_ARGUMENT, "data");
  if (th_size() > 1) {
    x = th_rank() == 0 ? 11 : 5;
    CHECK_FAILS(fsdp_broadcast(ctx, FSDP_GROUP_WORLD, 0, &x, th_rank() == 1 ? 2 : 4),
                FSDP_ERR_MISMATCH, "");
    CHECK_MSG(x == (th_rank() == 0 ? 11 : 5), "a refused broadcast changes nothing");
  }
  CHECK_FAILS(fsdp_broadcast(NULL, FSDP_GROUP_WORLD, 0, &x, sizeof x), FSDP_ERR_INVALID_HANDLE,
              "ctx");
}

static void check_allreduce(fsdp_context_t ctx) {
  const fsdp_group_t groups[3] = {FSDP_GROUP_WORLD, FSDP_GROUP_SHARD, FSDP_GROUP_REPLICATE};
  for (int k = 0; k < 3; ++k) {
    int grank = 0, gsize = 0;
    CHECK_OK(fsdp_group_info(ctx, groups[k], &grank, &gsize));
    /* Rank r of the group gives r + 1, -(r + 1) / 3 and 2^-r: the sums, largest and smallest
     * follow from the group's size alone (sums of dyadic values: exact in any order). */
    const double mine[3] = {grank + 1.0, -(grank + 1.0) / 3.0, ldexp(1.0, -grank)};
    double sum[3] = {0, 0, 0}, max[3] = {-INFINITY, -INFINITY, -INFINITY};
    double min[3] = {INFINITY, INFINITY, INFINITY};
    for (int r = 0; r < gsize; ++r) {
      const double v[3] = {r + 1.0, -(r + 1.0) / 3.0, ldexp(1.0, -r)};
      for (int i = 0; i < 3; ++i) {
        sum[i] += i == 1 ? 0.0 : v[i];
        max[i] = v[i] > max[i] ? v[i] : max[i];
        min[i] = v[i] < min[i] ? v[i] : min[i];
      }
    }
    const fsdp_reduce_op_t ops[3] = {FSDP_OP_SUM, FSDP_OP_MAX, FSDP_OP_MIN};
    const double* want[3] = {sum, max, min};
    for (int o = 0; o < 3; ++o) {
      double data[3];
      memcpy(data, mine, sizeof data);
      CHECK_OK(fsdp_allreduce(ctx, groups[k], ops[o], data, 3));
      CHECK_MSG(
          data[0] == want[o][0] && data[2] == want[o][2] &&
              (o == 0 ? fabs(data[1] + gsize * (gsize + 1) / 6.0) < 1e-12 : data[1] == want[o][1]),
          "allreduce: the group's sum, largest and smallest values on every rank");
    }
  }
  double nan_flag = th_rank() == th_size() - 1 ? NAN : 0.0;
  CHECK_OK(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, &nan_flag, 1));
  CHECK_MSG(isnan(nan_flag), "allreduce: a NaN on one rank makes the sum NaN everywhere");
  CHECK_OK(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, NULL, 0));
  double x = 5.0;
  CHECK_FAILS(fsdp_allreduce(ctx, (fsdp_group_t)9, FSDP_OP_SUM, &x, 1), FSDP_ERR_INVALID_ARGUMENT,
              "group");
  CHECK_FAILS(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, (fsdp_reduce_op_t)7, &x, 1),
              FSDP_ERR_INVALID_ARGUMENT, "op = 7");
  CHECK_FAILS(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, NULL, 1),
              FSDP_ERR_INVALID_ARGUMENT, "data");
  if (th_size() > 1) {
    CHECK_FAILS(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, &x, th_rank() == 1 ? 2 : 1),
                FSDP_ERR_MISMATCH, "");
    CHECK_MSG(x == 5.0, "a refused allreduce changes nothing");
  }
  CHECK_FAILS(fsdp_allreduce(NULL, FSDP_GROUP_WORLD, FSDP_OP_SUM, &x, 1), FSDP_ERR_INVALID_HANDLE,
              "ctx");
}

static void check_collectives(fsdp_context_t ctx) {
  check_broadcast(ctx);
  check_allreduce(ctx);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_gather_params");
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  check_gather(ctx);
  check_collectives(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
  th_run_full_and_hybrid(check_collectives);
  return th_finish();
}
