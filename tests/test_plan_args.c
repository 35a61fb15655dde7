/* Bad input to every fsdp_plan_* call: a specific status, a message naming the call and the
 * argument (or field), and nothing changed (the plan's units and the caller's outputs stay as they
 * were). Local calls: one rank. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* The call fails with `status`, and its message names the call and `needle`. */
#define REFUSED(call, status, fname, needle)                                           \
  do {                                                                                 \
    CHECK_FAILS(call, status, needle);                                                 \
    CHECK_MSG(strstr(fsdp_last_error(), fname) != NULL, "the message names the call"); \
  } while (0)

static const int64_t kShape[2] = {6, 5};

static size_t units_of(fsdp_plan_t plan) {
  char json[4096];
  size_t len = 0;
  if (fsdp_plan_describe(plan, NULL, 0, json, sizeof json, &len) != FSDP_SUCCESS) return 0;
  size_t n = 0;
  for (const char* p = json; (p = strstr(p, "\"numel\"")) != NULL; ++p) ++n;
  return n;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_plan_args");
  const char* C = "fsdp_plan_create";
  REFUSED(fsdp_plan_create(NULL), FSDP_ERR_INVALID_ARGUMENT, C, "plan");

  fsdp_plan_t plan = NULL;
  CHECK_OK(fsdp_plan_create(&plan));
  fsdp_plan_memory_t mem = {sizeof mem};
  /* An empty plan: nothing to plan. */
  REFUSED(fsdp_plan_memory(plan, NULL, 0, &mem), FSDP_ERR_STATE, "fsdp_plan_memory", "no units");

  /* ---- fsdp_plan_add_unit ---- */
  const char* A = "fsdp_plan_add_unit";
  fsdp_param_desc_t d[2] = {{"w", 2, kShape, FSDP_FLOAT32, 1}, {"b", 1, kShape, FSDP_FLOAT32, 0}};
  int index = -7;
  REFUSED(fsdp_plan_add_unit(NULL, "u", 2, d, &index), FSDP_ERR_INVALID_HANDLE, A, "plan");
  REFUSED(fsdp_plan_add_unit(plan, "u", 0, d, &index), FSDP_ERR_INVALID_ARGUMENT, A, "nparams");
  REFUSED(fsdp_plan_add_unit(plan, "u", 2, NULL, &index), FSDP_ERR_INVALID_ARGUMENT, A, "descs");
  fsdp_param_desc_t bad[2] = {d[0], d[1]};
  bad[1].dtype = (fsdp_dtype_t)42;
  REFUSED(fsdp_plan_add_unit(plan, "u", 2, bad, &index), FSDP_ERR_INVALID_ARGUMENT, A,
          "descs[1].dtype");
  bad[1] = d[1];
  bad[1].dtype = FSDP_BFLOAT16;
  REFUSED(fsdp_plan_add_unit(plan, "u", 2, bad, &index), FSDP_ERR_INVALID_ARGUMENT, A,
          "descs[1].dtype");
  const int64_t negative[1] = {-3};
  bad[1] = d[1];
  bad[1].shape = negative;
  REFUSED(fsdp_plan_add_unit(plan, "u", 2, bad, &index), FSDP_ERR_INVALID_ARGUMENT, A,
          "descs[1].shape[0]");
  bad[1] = d[0];
  REFUSED(fsdp_plan_add_unit(plan, "u", 2, bad, &index), FSDP_ERR_INVALID_ARGUMENT, A,
          "descs[1].name");
  CHECK(index == -7);
  CHECK_OK(fsdp_plan_add_unit(plan, "embed", 2, d, &index));
  CHECK(index == 0);
  CHECK_OK(fsdp_plan_add_unit(plan, NULL, 1, d, &index));
  CHECK(index == 1);
  CHECK(units_of(plan) == 2);

  /* ---- fsdp_plan_tie ---- */
  const char* T = "fsdp_plan_tie";
  int alias = -7;
  REFUSED(fsdp_plan_tie(plan, 2, "x", 0, 0, &alias), FSDP_ERR_OUT_OF_RANGE, T, "user_unit");
  REFUSED(fsdp_plan_tie(plan, -1, "x", 0, 0, &alias), FSDP_ERR_OUT_OF_RANGE, T, "user_unit");
  REFUSED(fsdp_plan_tie(plan, 1, "x", 5, 0, &alias), FSDP_ERR_OUT_OF_RANGE, T, "owner_unit");
  REFUSED(fsdp_plan_tie(plan, 1, "x", 0, 2, &alias), FSDP_ERR_OUT_OF_RANGE, T, "owner_index");
  REFUSED(fsdp_plan_tie(plan, 1, NULL, 0, 0, &alias), FSDP_ERR_INVALID_ARGUMENT, T, "alias");
  REFUSED(fsdp_plan_tie(plan, 1, "", 0, 0, &alias), FSDP_ERR_INVALID_ARGUMENT, T, "alias");
  REFUSED(fsdp_plan_tie(plan, 1, "w", 0, 0, &alias), FSDP_ERR_INVALID_ARGUMENT, T, "alias");
  REFUSED(fsdp_plan_tie(plan, 1, "x", 1, 0, &alias), FSDP_ERR_INVALID_ARGUMENT, T, "owner_unit");
  CHECK(alias == -7);
  CHECK_OK(fsdp_plan_tie(plan, 1, "head.w", 0, 0, &alias));
  CHECK(alias == 1);
  REFUSED(fsdp_plan_tie(plan, 1, "head.w", 0, 1, &alias), FSDP_ERR_INVALID_ARGUMENT, T, "alias");
  REFUSED(fsdp_plan_tie(plan, 0, "x", 1, 0, &alias), FSDP_ERR_INVALID_ARGUMENT, T, "owner");
  CHECK(alias == 1);

  /* ---- fsdp_plan_read_model (its files are another test's: only the arguments here) ---- */
  const char* R = "fsdp_plan_read_model";
  REFUSED(fsdp_plan_read_model(plan, NULL, FSDP_PLAN_MODEL_JSON), FSDP_ERR_INVALID_ARGUMENT, R,
          "path");
  REFUSED(fsdp_plan_read_model(plan, "", FSDP_PLAN_MODEL_JSON), FSDP_ERR_INVALID_ARGUMENT, R,
          "path");
  REFUSED(fsdp_plan_read_model(plan, "m.json", (fsdp_plan_model_format_t)9),
          FSDP_ERR_INVALID_ARGUMENT, R, "format");
  REFUSED(fsdp_plan_read_model(plan, "m.json", FSDP_PLAN_MODEL_JSON), FSDP_ERR_STATE, R, "plan");
  CHECK(units_of(plan) == 2);

  /* ---- fsdp_plan_memory and fsdp_plan_traffic: the job ---- */
  const char* M = "fsdp_plan_memory";
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_MPI;
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;
  job.config = &cfg;
  job.world_size = 4;
  job.ranks_per_node = 2;
  memset(&mem, 0xab, sizeof mem);
  mem.size = sizeof mem;
  fsdp_plan_memory_t untouched = mem;
  REFUSED(fsdp_plan_memory(NULL, &job, 0, &mem), FSDP_ERR_INVALID_HANDLE, M, "plan");
  REFUSED(fsdp_plan_memory(plan, &job, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, M, "memory");
  REFUSED(fsdp_plan_memory(plan, &job, 4, &mem), FSDP_ERR_OUT_OF_RANGE, M, "rank");
  REFUSED(fsdp_plan_memory(plan, &job, -1, &mem), FSDP_ERR_OUT_OF_RANGE, M, "rank");
  fsdp_plan_job_t j = job;
  j.size = 0;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->size");
  j = job;
  j.world_size = 0;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->world_size");
  j = job;
  j.ranks_per_node = 3;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->ranks_per_node");
  j.ranks_per_node = -1;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->ranks_per_node");
  j = job;
  j.optimizer = (fsdp_optimizer_kind_t)7;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->optimizer");
  j = job;
  j.no_optimizer = 2;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->no_optimizer");
  j = job;
  j.prefetch_backward = 2;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "job->prefetch_backward");
  fsdp_hyperparams_t hp = FSDP_SGD_DEFAULTS;
  hp.amsgrad = 1;
  j = job;
  j.optimizer = FSDP_OPTIMIZER_SGD;
  j.hyperparams = &hp;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "job->hyperparams.amsgrad");
  fsdp_config_t c = cfg;
  j = job;
  j.config = &c;
  c.strategy = FSDP_HYBRID_SHARD;
  c.sharding_factor = 3;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "sharding_factor = 3 does not divide");
  c = cfg;
  c.sharding_factor = 2; /* full shard over 4 ranks */
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "sharding_factor");
  c = cfg;
  c.param_dtype = (fsdp_dtype_t)17;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "param_dtype");
  c = cfg;
  c.param_dtype = FSDP_FLOAT64; /* float32 parameters do not compute in float64 */
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "unit 0 ('embed')");
  c = cfg;
  c.size = 3;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "cfg->size");
  c = cfg;
  c.transport = FSDP_TRANSPORT_SHM;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_UNSUPPORTED, M, "cfg->transport");
  c = cfg;
  c.memory_space = FSDP_MEMORY_CUDA; /* with MPI: the staged transport's pinned buffers */
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_UNSUPPORTED, M, "cfg->transport");
  /* HFSDP and hpZ where the library refuses them: HFSDP without hybrid sharding, hpZ without
   * sharding. */
  c = cfg;
  c.hfsdp = 1;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "cfg->hfsdp");
  c = cfg;
  c.strategy = FSDP_NO_SHARD;
  c.hpz = 1;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "cfg->hpz");
  /* hpZ over NCCL (since 0.13; 4 ranks on 2 nodes: the shard group spans them) keeps the
   * secondary partitions the host's MPI plan keeps. */
  c = cfg;
  c.hpz = 1;
  fsdp_plan_memory_t host_mem = {sizeof host_mem};
  CHECK_OK(fsdp_plan_memory(plan, &j, 0, &host_mem));
  c.memory_space = FSDP_MEMORY_CUDA;
  c.transport = FSDP_TRANSPORT_NCCL;
  fsdp_plan_memory_t cuda_mem = {sizeof cuda_mem};
  CHECK_OK(fsdp_plan_memory(plan, &j, 0, &cuda_mem));
  CHECK(cuda_mem.peak_secondary_bytes > 0 &&
        cuda_mem.peak_secondary_bytes == host_mem.peak_secondary_bytes);
  /* The activation fields (since 0.12). */
  j = job;
  j.batch_size = 0;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M, "job->batch_size");
  j = job;
  j.sequence_length = -2;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "job->sequence_length");
  j = job;
  j.activation_checkpointing = 2;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "job->activation_checkpointing");
  j = job;
  j.activation_bytes_per_layer = -1;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "job->activation_bytes_per_layer");
  /* A layout has no hidden size: checkpointing's kept inputs cannot be sized from it. */
  j = job;
  j.activation_bytes_per_layer = 1000;
  j.activation_checkpointing = 1;
  REFUSED(fsdp_plan_memory(plan, &j, 0, &mem), FSDP_ERR_INVALID_ARGUMENT, M,
          "job->activation_checkpointing");
  fsdp_plan_memory_t small = {1};
  REFUSED(fsdp_plan_memory(plan, &job, 0, &small), FSDP_ERR_INVALID_ARGUMENT, M, "memory->size");
  CHECK_MSG(memcmp(&mem, &untouched, sizeof mem) == 0, "a refused call leaves memory as it was");
  CHECK_OK(fsdp_plan_memory(plan, &job, 3, &mem));
  CHECK(mem.shard_bytes > 0 && mem.peak_bytes >= mem.shard_bytes);
  /* Host memory: no device; without a shape or the caller's bytes, no activations. */
  CHECK(mem.activation_bytes == 0 && mem.device_total_bytes == 0 &&
        mem.host_total_bytes == mem.peak_bytes);
  /* The caller's bytes per layer: one layer per unit of a layout (2 here). */
  j = job;
  j.activation_bytes_per_layer = 1000;
  fsdp_plan_memory_t with = {sizeof with};
  CHECK_OK(fsdp_plan_memory(plan, &j, 0, &with));
  CHECK(with.activation_bytes == 2000 && with.host_total_bytes == with.peak_bytes + 2000);
  /* A caller compiled against 0.11's struct gets the fields it knows. */
  fsdp_plan_memory_t old;
  memset(&old, 0xee, sizeof old);
  old.size = offsetof(fsdp_plan_memory_t, activation_bytes);
  CHECK_OK(fsdp_plan_memory(plan, &j, 0, &old));
  CHECK(old.peak_bytes == with.peak_bytes && old.activation_bytes == (size_t)-1 / 0xff * 0xee);

  const char* F = "fsdp_plan_traffic";
  fsdp_plan_traffic_t tr;
  memset(&tr, 0xcd, sizeof tr);
  tr.size = sizeof tr;
  fsdp_plan_traffic_t tr_before = tr;
  REFUSED(fsdp_plan_traffic(plan, &job, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, F, "traffic");
  REFUSED(fsdp_plan_traffic(plan, &job, 9, &tr), FSDP_ERR_OUT_OF_RANGE, F, "rank");
  j = job;
  j.ranks_per_node = 3;
  REFUSED(fsdp_plan_traffic(plan, &j, 0, &tr), FSDP_ERR_INVALID_ARGUMENT, F, "job->ranks_per_node");
  CHECK_MSG(memcmp(&tr, &tr_before, sizeof tr) == 0, "a refused call leaves traffic as it was");
  /* The traffic plan does not depend on where memory lives. */
  c = cfg;
  c.transport = FSDP_TRANSPORT_SHM;
  j = job;
  j.config = &c;
  CHECK_OK(fsdp_plan_traffic(plan, &j, 0, &tr));
  CHECK(tr.all_gather_calls == 6 && tr.reduce_scatter_calls == 2 && tr.all_reduce_calls == 0);

  /* The ring model at a scale the other test cannot run: 512 ranks, 8 to a node, one unit of
   * 65536 float32 (262144 bytes unsharded, 32768 a shard of 8, 512 a shard of 512: no padding
   * either way, hybrid's blocks being cut in 64 pieces of 128). Hybrid over nodes: all-gathers
   * and the reduce-scatter stay in the node ((F-1)/F of each buffer to the next rank of the
   * node), the all-reduce of the 32768-byte partial sum goes to the same index on the next node,
   * 2(R-1)/R of it; with HFSDP a reduce-scatter of it, (R-1)/R, and after the step an all-gather
   * of the shard across replicas, (R-1)/R. Full sharding: rank 0 sends to rank 1 (its node),
   * rank 7 to rank 8 (the next node). */
  {
    fsdp_plan_t one = NULL;
    const int64_t n1[1] = {65536};
    fsdp_param_desc_t d1 = {"w", 1, n1, FSDP_FLOAT32, 1};
    CHECK_OK(fsdp_plan_create(&one));
    CHECK_OK(fsdp_plan_add_unit(one, "u", 1, &d1, NULL));
    fsdp_config_t hybrid = cfg;
    hybrid.strategy = FSDP_HYBRID_SHARD;
    fsdp_plan_job_t big = job;
    big.config = &hybrid;
    big.world_size = 512;
    big.ranks_per_node = 8;
    fsdp_plan_traffic_t t = {sizeof t};
    CHECK_OK(fsdp_plan_traffic(one, &big, 0, &t));
    CHECK(t.all_gather_calls == 2 && t.all_gather_bytes == 2 * 262144);
    CHECK(t.reduce_scatter_calls == 1 && t.reduce_scatter_bytes == 262144);
    CHECK(t.all_reduce_calls == 1 && t.all_reduce_bytes == 32768);
    CHECK(t.replica_reduce_scatter_calls == 0 && t.replica_all_gather_calls == 0);
    CHECK(t.intra_node_bytes == 3 * 262144 * 7 / 8);
    CHECK(t.inter_node_bytes == 2 * 32768 * 63 / 64);
    hybrid.hfsdp = 1;
    CHECK_OK(fsdp_plan_traffic(one, &big, 0, &t));
    CHECK(t.all_reduce_calls == 0 && t.all_reduce_bytes == 0);
    CHECK(t.replica_reduce_scatter_calls == 1 && t.replica_reduce_scatter_bytes == 32768);
    CHECK(t.replica_all_gather_calls == 1 && t.replica_all_gather_bytes == 32768);
    CHECK(t.intra_node_bytes == 3 * 262144 * 7 / 8);
    CHECK(t.inter_node_bytes == 2 * (32768 * 63 / 64));
    fsdp_plan_memory_t hm = {sizeof hm};
    CHECK_OK(fsdp_plan_memory(one, &big, 0, &hm));
    CHECK(hm.shard_bytes == 32768 && hm.grad_shard_bytes == 512);
    CHECK(hm.optimizer_state_bytes == 2 * 512); /* AdamW's two moments of the 1/512 piece */
    hybrid.hfsdp = 0;
    big.config = &cfg; /* full shard over 512: 512 blocks of 128 elements */
    CHECK_OK(fsdp_plan_traffic(one, &big, 0, &t));
    const size_t full = 262144; /* unsharded bytes */
    CHECK(t.all_gather_bytes == 2 * full && t.all_reduce_calls == 0);
    CHECK(t.intra_node_bytes == 3 * (full * 511 / 512) && t.inter_node_bytes == 0);
    CHECK_OK(fsdp_plan_traffic(one, &big, 7, &t));
    CHECK(t.inter_node_bytes == 3 * (full * 511 / 512) && t.intra_node_bytes == 0);
    fsdp_plan_memory_t bm = {sizeof bm};
    CHECK_OK(fsdp_plan_memory(one, &big, 511, &bm));
    CHECK(bm.shard_bytes == 128 * 4 && bm.peak_unsharded_bytes == full);
    CHECK_OK(fsdp_plan_destroy(&one));
  }

  /* ---- fsdp_plan_describe ---- */
  const char* D = "fsdp_plan_describe";
  size_t len = 0;
  CHECK_OK(fsdp_plan_describe(plan, &job, 1, NULL, 0, &len));
  char json[8192];
  CHECK(len > 0 && len < sizeof json);
  memset(json, 'x', sizeof json);
  REFUSED(fsdp_plan_describe(plan, &job, 1, json, len, NULL), FSDP_ERR_INVALID_ARGUMENT, D,
          "capacity");
  CHECK_MSG(json[0] == 'x', "a refused describe writes nothing");
  REFUSED(fsdp_plan_describe(plan, &job, 4, json, sizeof json, NULL), FSDP_ERR_OUT_OF_RANGE, D,
          "rank");
  CHECK_OK(fsdp_plan_describe(plan, &job, 1, json, sizeof json, NULL));
  CHECK(strlen(json) == len && strncmp(json, "{\"world_size\": 4, \"ranks_per_node\": 2", 37) == 0);
  CHECK(strstr(json, "\"name\": \"embed\"") != NULL);
  CHECK(strstr(json, "\"memory\": {\"shard_bytes\": ") != NULL);
  j.config = &c; /* shared memory: no memory plan, still a description */
  CHECK_OK(fsdp_plan_describe(plan, &j, 1, json, sizeof json, NULL));
  CHECK(strstr(json, "\"memory\": null") != NULL);

  /* ---- fsdp_plan_machine_preset ---- */
  const char* P = "fsdp_plan_machine_preset";
  fsdp_plan_machine_t mach = FSDP_PLAN_MACHINE_INIT;
  const fsdp_plan_machine_t blank = mach;
  REFUSED(fsdp_plan_machine_preset(NULL, &mach), FSDP_ERR_INVALID_ARGUMENT, P, "name");
  REFUSED(fsdp_plan_machine_preset("a100-80gb-efa", NULL), FSDP_ERR_INVALID_ARGUMENT, P, "machine");
  REFUSED(fsdp_plan_machine_preset("tpu-v9", &mach), FSDP_ERR_INVALID_ARGUMENT, P, "'tpu-v9'");
  CHECK_MSG(strstr(fsdp_last_error(), "h100-80gb-efa") != NULL, "the known presets listed");
  CHECK_MSG(memcmp(&mach, &blank, sizeof mach) == 0, "a refused preset leaves machine as it was");
  const char* presets[] = {"a100-40gb-efa", "a100-80gb-efa", "a100-40gb-roce", "a100-80gb-roce",
                           "h100-80gb-efa"};
  for (int k = 0; k < 5; ++k) {
    CHECK_OK(fsdp_plan_machine_preset(presets[k], &mach));
    CHECK(mach.size == sizeof mach && mach.peak_flops_16bit > mach.peak_flops_32bit &&
          mach.hbm_bytes >= ((size_t)40 << 30) && mach.intra_node_bandwidth > 0 &&
          mach.inter_node_bandwidth < mach.intra_node_bandwidth && mach.compute_efficiency > 0);
  }
  CHECK_OK(fsdp_plan_machine_preset("a100-80gb-roce", &mach));
  CHECK(mach.peak_flops_16bit == 312e12 && mach.hbm_bytes == ((size_t)80 << 30));

  /* ---- fsdp_plan_time ---- */
  const char* TM = "fsdp_plan_time";
  fsdp_plan_time_t tm;
  memset(&tm, 0xcd, sizeof tm);
  tm.size = sizeof tm;
  const fsdp_plan_time_t tm_before = tm;
  j = job;
  j.sequence_length = 128;
  REFUSED(fsdp_plan_time(plan, &j, NULL, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM, "machine");
  REFUSED(fsdp_plan_time(plan, &j, &mach, 0, NULL), FSDP_ERR_INVALID_ARGUMENT, TM, "time");
  REFUSED(fsdp_plan_time(plan, &job, &mach, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM,
          "job->sequence_length"); /* a layout has no maximum sequence to default to */
  fsdp_plan_machine_t m2 = mach;
  m2.inter_node_bandwidth = 0;
  REFUSED(fsdp_plan_time(plan, &j, &m2, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM,
          "machine->inter_node_bandwidth");
  m2 = mach;
  m2.intra_node_latency_s = -1e-6;
  REFUSED(fsdp_plan_time(plan, &j, &m2, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM,
          "machine->intra_node_latency_s");
  m2 = mach;
  m2.compute_efficiency = 1.5;
  REFUSED(fsdp_plan_time(plan, &j, &m2, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM,
          "machine->compute_efficiency");
  m2 = mach;
  m2.peak_flops_32bit = 0.0 / 0.0;
  REFUSED(fsdp_plan_time(plan, &j, &m2, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM,
          "machine->peak_flops_32bit");
  m2 = mach;
  m2.hbm_bytes = 0;
  REFUSED(fsdp_plan_time(plan, &j, &m2, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM,
          "machine->hbm_bytes");
  m2 = mach;
  m2.size = 2;
  REFUSED(fsdp_plan_time(plan, &j, &m2, 0, &tm), FSDP_ERR_INVALID_ARGUMENT, TM, "machine->size");
  REFUSED(fsdp_plan_time(plan, &j, &mach, 4, &tm), FSDP_ERR_OUT_OF_RANGE, TM, "rank");
  CHECK_MSG(memcmp(&tm, &tm_before, sizeof tm) == 0, "a refused call leaves time as it was");
  CHECK_OK(fsdp_plan_time(plan, &j, &mach, 0, &tm));
  CHECK(tm.tokens_per_step == 128 && tm.step_s >= tm.compute_s && tm.compute_s > 0);

  /* ---- fsdp_plan_describe_on ---- */
  const char* DO = "fsdp_plan_describe_on";
  char on[8192];
  memset(on, 'x', sizeof on);
  REFUSED(fsdp_plan_describe_on(plan, &j, NULL, 0, on, sizeof on, NULL), FSDP_ERR_INVALID_ARGUMENT,
          DO, "machine");
  m2 = mach;
  m2.intra_node_bandwidth = -1;
  REFUSED(fsdp_plan_describe_on(plan, &j, &m2, 0, on, sizeof on, NULL), FSDP_ERR_INVALID_ARGUMENT,
          DO, "machine->intra_node_bandwidth");
  REFUSED(fsdp_plan_describe_on(plan, &job, &mach, 0, on, sizeof on, NULL),
          FSDP_ERR_INVALID_ARGUMENT, DO, "job->sequence_length");
  REFUSED(fsdp_plan_describe_on(plan, &j, &mach, 0, on, 10, NULL), FSDP_ERR_INVALID_ARGUMENT, DO,
          "capacity");
  CHECK_MSG(on[0] == 'x', "a refused describe_on writes nothing");
  CHECK_OK(fsdp_plan_describe_on(plan, &j, &mach, 0, on, sizeof on, NULL));
  CHECK(strstr(on, "\"time\": {\"compute_s\": ") != NULL && strstr(on, "\"fits\": true}") != NULL);
  m2 = mach;
  m2.hbm_bytes = 1; /* host memory here: its total against the budget */
  CHECK_OK(fsdp_plan_describe_on(plan, &j, &m2, 0, on, sizeof on, NULL));
  CHECK(strstr(on, "\"fits\": false}") != NULL);
  c = cfg;
  c.transport = FSDP_TRANSPORT_SHM; /* no memory plan: no verdict, still a time */
  fsdp_plan_job_t js = j;
  js.config = &c;
  CHECK_OK(fsdp_plan_describe_on(plan, &js, &mach, 0, on, sizeof on, NULL));
  CHECK(strstr(on, "\"memory\": null") != NULL && strstr(on, "\"fits\": null}") != NULL &&
        strstr(on, "\"step_s\": ") != NULL);

  /* ---- fsdp_plan_sweep ---- */
  const char* SW = "fsdp_plan_sweep";
  size_t slen = 0;
  REFUSED(fsdp_plan_sweep(plan, &job, &mach, 0, NULL, 0, &slen), FSDP_ERR_INVALID_ARGUMENT, SW,
          "job->sequence_length");
  m2 = mach;
  m2.size = 2;
  REFUSED(fsdp_plan_sweep(plan, &j, &m2, 0, NULL, 0, &slen), FSDP_ERR_INVALID_ARGUMENT, SW,
          "machine->size");
  CHECK(slen == 0);
  CHECK_OK(fsdp_plan_sweep(plan, &j, &mach, 0, NULL, 0, &slen));
  char small_text[8];
  memset(small_text, 'x', sizeof small_text);
  REFUSED(fsdp_plan_sweep(plan, &j, &mach, 0, small_text, sizeof small_text, NULL),
          FSDP_ERR_INVALID_ARGUMENT, SW, "capacity");
  CHECK_MSG(small_text[0] == 'x', "a refused sweep writes nothing");
  /* A budget of one byte: nothing fits. */
  char text[256];
  CHECK_OK(fsdp_plan_sweep(plan, &j, &mach, 1, text, sizeof text, NULL));
  CHECK(strcmp(text, "{\"budget_bytes\": 1, \"configurations\": []}") == 0);

  /* ---- fsdp_plan_destroy ---- */
  const char* X = "fsdp_plan_destroy";
  REFUSED(fsdp_plan_destroy(NULL), FSDP_ERR_INVALID_ARGUMENT, X, "plan");
  fsdp_plan_t none = NULL;
  REFUSED(fsdp_plan_destroy(&none), FSDP_ERR_INVALID_HANDLE, X, "plan");
  fsdp_plan_t copy = plan;
  CHECK_OK(fsdp_plan_destroy(&plan));
  CHECK(plan == NULL);
  REFUSED(fsdp_plan_destroy(&copy), FSDP_ERR_DESTROYED_HANDLE, X, "plan");
  REFUSED(fsdp_plan_memory(copy, &job, 0, &mem), FSDP_ERR_DESTROYED_HANDLE, M, "plan");
  return th_finish();
}
