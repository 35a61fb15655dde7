/* The tolerance rule the GPU test applies to NCCL's sums (tests/sum_bound.h), checked on the host
 * where two transports sum in different orders: the node shared-memory transport and plain MPI
 * (MPI_Reduce_scatter_block in MPICH's order). Three units as in test_gpu_training: float32;
 * bfloat16 compute reduced in bfloat16; bfloat16 compute reduced in float32. The same rank
 * gradients reduced on both; every element of the gradient shards must agree within the bound
 * computed from every rank's gradient, and the comparison must not be vacuous: at 3 ranks the two
 * orders differ bitwise somewhere (else the rule would be untested). */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "precision_ref.h"
#include "sum_bound.h"

enum { NU = 3, N = 4099 };
static const int BF16[NU] = {0, 1, 1};
static const int REDUCE_BF16[NU] = {0, 1, 0};

/* Rank r's gradient of unit *(int*)arg as both contexts see it (bfloat16 values for bfloat16
 * units). */
static void rank_gradient(float* g, int r, const void* arg) {
  const int k = *(const int*)arg;
  uint64_t s = 1000u + (uint64_t)(k * 17 + r);
  for (int i = 0; i < N; ++i) g[i] = (float)(th_uniform(&s) * 2.0 - 1.0) * (float)(1 + i % 7);
  if (BF16[k])
    for (int i = 0; i < N; ++i) {
      uint16_t b = 0;
      CHECK_OK(fsdp_convert(&b, FSDP_BFLOAT16, &g[i], FSDP_FLOAT32, 1));
      g[i] = (float)ref_decode(b, REF_BF16);
    }
}

static void make(fsdp_context_t* ctx, fsdp_unit_t* u, fsdp_transport_t t) {
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = t;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, ctx));
  static const int64_t shape[1] = {N};
  for (int k = 0; k < NU; ++k) {
    fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
    fsdp_unit_options_t o = FSDP_UNIT_OPTIONS_INIT;
    if (BF16[k]) o.param_dtype = FSDP_BFLOAT16;
    if (BF16[k] && !REDUCE_BF16[k]) o.reduce_dtype = FSDP_FLOAT32;
    CHECK_OK(fsdp_unit_create_ex(*ctx, 1, &d, NULL, &o, &u[k]));
  }
}

static void reduce(fsdp_unit_t u, int k) {
  void* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, &g));
  float* mine = malloc(N * sizeof(float));
  rank_gradient(mine, th_rank(), &k);
  if (BF16[k])
    CHECK_OK(fsdp_convert(g, FSDP_BFLOAT16, mine, FSDP_FLOAT32, N));
  else
    memcpy(g, mine, N * sizeof(float));
  free(mine);
  CHECK_OK(fsdp_reduce_grads(u));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_sum_bounds");
  unsetenv("FSDP_TRANSPORT"); /* it would override both contexts' transports */
  const int W = th_size();
  fsdp_context_t a = NULL, b = NULL;
  fsdp_unit_t ua[NU], ub[NU];
  make(&a, ua, FSDP_TRANSPORT_AUTO); /* the node shared-memory transport here */
  make(&b, ub, FSDP_TRANSPORT_MPI);
  int srank = 0;
  CHECK_OK(fsdp_group_info(a, FSDP_GROUP_SHARD, &srank, NULL));
  long differ = 0;
  for (int k = 0; k < NU; ++k) {
    reduce(ua[k], k);
    reduce(ub[k], k);
    float *ga = NULL, *gb = NULL;
    size_t sn = 0;
    CHECK_OK(fsdp_shard_grad(ua[k], (void**)&ga, &sn));
    CHECK_OK(fsdp_shard_grad(ub[k], (void**)&gb, NULL));
    double* bound = calloc(sn + 1, sizeof(double));
    sum_bounds(bound, sn, (size_t)srank * sn, N, W,
               REDUCE_BF16[k] ? SUM_BOUND_U_BFLOAT16 : SUM_BOUND_U_FLOAT32, rank_gradient, &k);
    int bad = 0;
    for (size_t j = 0; j < sn; ++j) {
      bad += fabs((double)ga[j] - (double)gb[j]) > bound[j];
      differ += memcmp(&ga[j], &gb[j], sizeof(float)) != 0;
    }
    char msg[120];
    snprintf(msg, sizeof msg, "unit %d: the two transports' means agree within the sum bound", k);
    CHECK_MSG(bad == 0, msg);
    free(bound);
  }
  long all = 0;
  MPI_Allreduce(&differ, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (W >= 3)
    CHECK_MSG(all > 0, "at 3 ranks the two transports' orders differ somewhere (not vacuous)");
  if (th_rank() == 0)
    printf("%ld of the gradient shard elements differ bitwise between the transports\n", all);
  CHECK_OK(fsdp_finalize(&b));
  CHECK_OK(fsdp_finalize(&a));
  return th_finish();
}
