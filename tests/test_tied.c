/* Tied parameters: an embedding reused as the output head. The head unit reaches the embedding
 * unit's weight through a tie; both uses' gradients add into the embedding's full gradient and
 * the reduced shard equals the exact mean of their sum over ranks (integer gradients), computed
 * here. Misuse is refused with a clear status and changes nothing: reading the tie while the
 * owner is sharded, resharding or reducing the owner while the user is unsharded, destroying the
 * owner while tied, and bad tie arguments. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { V = 13, D = 5 };

static float embed_value(size_t e) {
  return (float)((int)(e * 7 % 11) - 5);
}
static float head_grad(int rank, size_t e) {
  return (float)((rank + 1) * (int)(e % 4));
}
static float embed_grad(int rank, size_t e) {
  return (float)((rank + 2) * (int)(e % 3) - 1);
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_tied");
  const int W = th_size();
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  static const int64_t es[2] = {V, D}, hs[1] = {V};
  float values[V * D];
  for (size_t e = 0; e < V * D; ++e) values[e] = embed_value(e);
  const void* ev[1] = {values};
  fsdp_param_desc_t de = {"embed.weight", 2, es, FSDP_FLOAT32, 1};
  fsdp_param_desc_t dh = {"head.bias", 1, hs, FSDP_FLOAT32, 1};
  fsdp_unit_t embed = NULL, head = NULL;
  CHECK_OK(fsdp_unit_create(ctx, 1, &de, ev, &embed));
  CHECK_OK(fsdp_unit_create(ctx, 1, &dh, NULL, &head));

  /* Bad ties first: nothing is recorded. */
  int alias = -1;
  CHECK_FAILS(fsdp_unit_tie(head, "head.bias", embed, 0, &alias), FSDP_ERR_INVALID_ARGUMENT,
              "alias");
  CHECK_FAILS(fsdp_unit_tie(head, "head.weight", head, 0, &alias), FSDP_ERR_INVALID_ARGUMENT,
              "owner");
  CHECK_FAILS(fsdp_unit_tie(head, "head.weight", embed, 3, &alias), FSDP_ERR_OUT_OF_RANGE, "index");
  CHECK_FAILS(fsdp_unit_tie(head, NULL, embed, 0, &alias), FSDP_ERR_INVALID_ARGUMENT, "alias");
  CHECK(alias == -1);
  CHECK_OK(fsdp_unit_tie(head, "head.weight", embed, 0, &alias));
  CHECK(alias == 1);
  size_t n = 0;
  CHECK_OK(fsdp_param_numel(head, alias, &n));
  CHECK(n == V * D);
  /* The alias's shard range is the owner's parameter's, in the owner's shard (fsdp.h). */
  size_t so[2], po[2], len[2];
  CHECK_OK(fsdp_param_shard_range(head, alias, &so[0], &po[0], &len[0]));
  CHECK_OK(fsdp_param_shard_range(embed, 0, &so[1], &po[1], &len[1]));
  CHECK(so[0] == so[1] && po[0] == po[1] && len[0] == len[1]);
  float* es_data = NULL;
  CHECK_OK(fsdp_shard_data(embed, (void**)&es_data, NULL));
  int alias_bad = 0;
  for (size_t k = 0; k < len[0]; ++k) alias_bad += es_data[so[0] + k] != values[po[0] + k];
  CHECK_MSG(alias_bad == 0, "the alias's range holds the tied parameter's values");
  CHECK_FAILS(fsdp_param_shard_range(head, alias + 1, NULL, NULL, NULL), FSDP_ERR_OUT_OF_RANGE,
              "tied");

  /* Forward: the head reads the embedding's unsharded weight. */
  void* p = NULL;
  CHECK_OK(fsdp_unshard(head));
  CHECK_FAILS(fsdp_param_data(head, alias, &p), FSDP_ERR_STATE, "tied");
  CHECK_OK(fsdp_unshard(embed));
  void *pe = NULL, *ph = NULL;
  CHECK_OK(fsdp_param_data(embed, 0, &pe));
  CHECK_OK(fsdp_param_data(head, alias, &ph));
  CHECK_MSG(pe == ph && memcmp(ph, values, sizeof values) == 0,
            "the tie reads the owner's unsharded weight");
  CHECK_FAILS(fsdp_reshard(embed), FSDP_ERR_STATE, "still unsharded");

  /* Backward: head first, adding into the shared gradient; then the embedding. */
  float *g = NULL, *gb = NULL;
  CHECK_OK(fsdp_grad_data(head, alias, (void**)&g));
  for (size_t e = 0; e < V * D; ++e) g[e] += head_grad(th_rank(), e);
  CHECK_OK(fsdp_grad_data(head, 0, (void**)&gb));
  for (size_t e = 0; e < V; ++e) gb[e] += 1.0f;
  CHECK_FAILS(fsdp_reduce_grads(embed), FSDP_ERR_STATE, "still unsharded");
  fsdp_unit_t keep = embed;
  CHECK_FAILS(fsdp_unit_destroy(&embed), FSDP_ERR_STATE, "ties");
  CHECK(embed == keep);
  CHECK_OK(fsdp_reshard(head));
  CHECK_OK(fsdp_reduce_grads(head));
  CHECK_OK(fsdp_grad_data(embed, 0, (void**)&g));
  for (size_t e = 0; e < V * D; ++e) g[e] += embed_grad(th_rank(), e);
  CHECK_OK(fsdp_reshard(embed));
  CHECK_OK(fsdp_reduce_grads(embed));

  int srank = 0, bad = 0;
  size_t shard_n = 0;
  float* gs = NULL;
  CHECK_OK(fsdp_group_info(ctx, FSDP_GROUP_SHARD, &srank, NULL));
  CHECK_OK(fsdp_shard_grad(embed, (void**)&gs, &shard_n));
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t e = (size_t)srank * shard_n + j;
    float sum = 0.0f;
    for (int r = 0; r < W && e < V * D; ++r) sum += head_grad(r, e) + embed_grad(r, e);
    bad += gs[j] != sum / (float)W;
  }
  CHECK_MSG(bad == 0, "both uses' gradients are summed in the owner's shard");

  /* One optimizer over both units updates the shared weight once. */
  fsdp_optimizer_t opt = NULL;
  fsdp_unit_t both[2] = {embed, head};
  fsdp_hyperparams_t h = FSDP_SGD_DEFAULTS;
  h.lr = 0.5;
  CHECK_OK(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, &h, 2, both, &opt));
  CHECK_OK(fsdp_optimizer_step(opt));
  float* shard = NULL;
  CHECK_OK(fsdp_shard_data(embed, (void**)&shard, NULL));
  for (size_t j = 0; j < shard_n; ++j) {
    const size_t e = (size_t)srank * shard_n + j;
    if (e < V * D) bad += shard[j] != embed_value(e) + (-0.5f) * gs[j];
  }
  CHECK_MSG(bad == 0, "the tied weight is updated once");
  CHECK_OK(fsdp_optimizer_destroy(&opt));

  CHECK_OK(fsdp_unit_destroy(&head)); /* the user goes first; then the owner may */
  CHECK_OK(fsdp_unit_destroy(&embed));
  CHECK_OK(fsdp_finalize(&ctx));
  return th_finish();
}
