/* The planner's estimates against references computed here, independently of src/plan:
 *  - activations of GPT-2 small (tests/data/plan/gpt2.json: 12 layers, hidden 768, 12 heads,
 *    1024 positions, ffn 4 x 768): in bfloat16, Korthikanti et al. 2022's closed form
 *    s b h (34 + 5 a s / h) per layer; in float32, the same paper's list of the tensors a layer
 *    keeps, each counted here at 4 bytes (dropout masks at 1); with activation checkpointing,
 *    each layer's input plus one layer recomputed; the caller's bytes per layer instead;
 *  - FLOPs per step (6 P T plus attention 12 L b s^2 h; checkpointing adds 2 P T + 4 L b s^2 h)
 *    with P the published 124,439,808 parameters;
 *  - step times of one and of two units on a two-node machine, derived by hand from the overlap
 *    rules of doc/planning-model.md (with and without prefetch), and the sum of the collectives'
 *    ring times;
 *  - CUDA memory and CPU offload: the device and host totals from the same job's fields.
 * Local calls: one rank. Argument: tests/data/plan/gpt2.json. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

static int close_to(double a, double b) {
  return fabs(a - b) <= 1e-12 * fabs(b) + 1e-15;
}

static fsdp_plan_memory_t memory_of(fsdp_plan_t plan, const fsdp_plan_job_t* job) {
  fsdp_plan_memory_t m = {sizeof m};
  CHECK_OK(fsdp_plan_memory(plan, job, 0, &m));
  return m;
}

/* A machine with round figures so that each time is easy to derive. */
static fsdp_plan_machine_t round_machine(void) {
  fsdp_plan_machine_t m = FSDP_PLAN_MACHINE_INIT;
  m.peak_flops_16bit = 2e12;
  m.peak_flops_32bit = 1e12;
  m.peak_flops_64bit = 0.5e12;
  m.hbm_bytes = (size_t)1 << 30;
  m.intra_node_bandwidth = 1e9;
  m.intra_node_latency_s = 1e-6;
  m.inter_node_bandwidth = 1e8;
  m.inter_node_latency_s = 1e-5;
  m.host_device_bandwidth = 5e8;
  m.compute_efficiency = 0.5;
  return m;
}

static void gpt2(const char* path) {
  fsdp_plan_t plan = NULL;
  CHECK_OK(fsdp_plan_create(&plan));
  CHECK_OK(fsdp_plan_read_model(plan, path, FSDP_PLAN_MODEL_HF_CONFIG));
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_MPI;
  cfg.param_dtype = FSDP_BFLOAT16;
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;
  job.config = &cfg;
  job.world_size = 8;
  job.ranks_per_node = 8;
  job.batch_size = 2;
  job.sequence_length = 512;
  const double L = 12, h = 768, a = 12, s = 512, b = 2;

  /* bfloat16: the paper's closed form. */
  fsdp_plan_memory_t m = memory_of(plan, &job);
  const double per_layer16 = s * b * h * (34 + 5 * a * s / h);
  CHECK(m.activation_bytes == (size_t)(L * per_layer16));
  CHECK(m.host_total_bytes == m.peak_bytes + m.activation_bytes && m.device_total_bytes == 0);

  /* float32: the tensors one layer keeps (section 4.1), 4 bytes each, masks 1. */
  cfg.param_dtype = FSDP_FLOAT32;
  const double sbh = s * b * h, ass = a * s * s * b, e = 4;
  const double attention = e * sbh /* QKV input */ + e * 2 * sbh /* Q, K */ +
                           e * ass /* softmax */ + ass /* its dropout mask */ +
                           e * ass /* dropout output */ + e * sbh /* V */ +
                           e * sbh /* projection input */ + sbh /* dropout mask */;
  const double mlp = e * sbh /* first linear's input */ + e * 4 * sbh /* GeLU input */ +
                     e * 4 * sbh /* GeLU output */ + sbh /* dropout mask */;
  const double norms = 2 * e * sbh;
  const double per_layer32 = attention + mlp + norms;
  m = memory_of(plan, &job);
  CHECK(m.activation_bytes == (size_t)(L * per_layer32));

  /* Checkpointing: each layer's input, and one layer again while it is recomputed. */
  job.activation_checkpointing = 1;
  m = memory_of(plan, &job);
  CHECK(m.activation_bytes == (size_t)(L * e * sbh + per_layer32));
  /* The caller's figure replaces the estimate of a layer, not the kept inputs. */
  job.activation_bytes_per_layer = 12345;
  m = memory_of(plan, &job);
  CHECK(m.activation_bytes == (size_t)(L * e * sbh) + 12345);
  job.activation_checkpointing = 0;
  m = memory_of(plan, &job);
  CHECK(m.activation_bytes == 12 * 12345);
  job.activation_bytes_per_layer = 0;

  /* The default sequence is the model's 1024 positions; longer is refused. */
  job.sequence_length = 0;
  m = memory_of(plan, &job);
  const double s1 = 1024, sbh1 = s1 * b * h, ass1 = a * s1 * s1 * b;
  CHECK(m.activation_bytes ==
        (size_t)(L * (e * (8 * sbh1 + 8 * sbh1 + 2 * ass1) + 2 * sbh1 + ass1)));
  job.sequence_length = 1025;
  fsdp_plan_memory_t untouched = m;
  CHECK_FAILS(fsdp_plan_memory(plan, &job, 0, &m), FSDP_ERR_INVALID_ARGUMENT,
              "job->sequence_length = 1025");
  CHECK(memcmp(&m, &untouched, sizeof m) == 0);
  job.sequence_length = 512;

  /* FLOPs per step. */
  fsdp_plan_machine_t mach = FSDP_PLAN_MACHINE_INIT;
  CHECK_OK(fsdp_plan_machine_preset("a100-80gb-efa", &mach));
  fsdp_plan_time_t t = {sizeof t};
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  const double P = 124439808, T = b * s;
  const double model = 6 * P * T + 12 * L * b * s * s * h;
  CHECK(t.tokens_per_step == T);
  CHECK(close_to(t.model_flops_per_step, model) && close_to(t.hardware_flops_per_step, model));
  CHECK(close_to(t.compute_s, model / (19.5e12 * 0.5)));
  CHECK(close_to(t.tflops_per_gpu, model / t.step_s / 1e12));
  job.activation_checkpointing = 1;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(close_to(t.hardware_flops_per_step, model + 2 * P * T + 4 * L * b * s * s * h));
  CHECK(close_to(t.model_flops_per_step, model));
  job.activation_checkpointing = 0;

  /* CUDA memory: the library's peak and the activations on the device, nothing on the host;
   * with CPU offload the shards, gradient shards and optimizer state on the host, and the
   * device's peak without them. */
  cfg.memory_space = FSDP_MEMORY_CUDA;
  cfg.transport = FSDP_TRANSPORT_NCCL;
  fsdp_plan_memory_t cuda = memory_of(plan, &job);
  CHECK(cuda.device_total_bytes == cuda.peak_bytes + cuda.activation_bytes &&
        cuda.host_total_bytes == 0 && cuda.scratch_bytes == 0);
  cfg.cpu_offload = 1;
  fsdp_plan_memory_t off = memory_of(plan, &job);
  CHECK(off.host_total_bytes == off.shard_bytes + off.grad_shard_bytes + off.optimizer_state_bytes);
  CHECK(off.peak_bytes == cuda.peak_bytes && off.activation_bytes == cuda.activation_bytes);
  /* No prefetch, so the device holds at most one unit's unsharded parameters and full gradient
   * at once, or the pool's cached copies of them: above the largest unsharded unit, below the
   * whole step's peak less the shards that now live on the host. */
  CHECK(off.device_total_bytes > off.activation_bytes + off.peak_unsharded_bytes &&
        off.device_total_bytes <=
            off.activation_bytes + cuda.peak_bytes - off.host_total_bytes + off.shard_bytes);
  CHECK_OK(fsdp_plan_destroy(&plan));
}

/* One unit of n float32 (no padding: n divisible by 2), 2 ranks on 2 nodes: each collective
 * crosses nodes. Forward: gather, compute 2 n T; backward: gather, compute 4 n T,
 * reduce-scatter: nothing overlaps. */
static void one_unit(void) {
  const int64_t n = 1000000;
  fsdp_param_desc_t d = {"w", 1, &n, FSDP_FLOAT32, 1};
  fsdp_plan_t plan = NULL;
  CHECK_OK(fsdp_plan_create(&plan));
  CHECK_OK(fsdp_plan_add_unit(plan, "u", 1, &d, NULL));
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_MPI;
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;
  job.config = &cfg;
  job.world_size = 2;
  job.ranks_per_node = 1;
  job.batch_size = 4;
  job.sequence_length = 100;
  const fsdp_plan_machine_t mach = round_machine();
  fsdp_plan_time_t t = {sizeof t};
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  const double T = 400, rate = 1e12 * 0.5, bytes = 4e6;
  const double ring = 1e-5 + bytes / 2 / 1e8; /* half the buffer over the inter-node link */
  CHECK(close_to(t.compute_s, 6 * 1e6 * T / rate));
  CHECK(close_to(t.all_gather_s, 2 * ring) && close_to(t.reduce_scatter_s, ring) &&
        t.all_reduce_s == 0 && t.offload_copy_s == 0);
  CHECK(close_to(t.step_s, 3 * ring + t.compute_s));
  CHECK(close_to(t.exposed_comm_s, 3 * ring));
  /* One node: the intra-node link. */
  job.ranks_per_node = 2;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(close_to(t.all_gather_s, 2 * (1e-6 + bytes / 2 / 1e9)));
  /* Hybrid over two nodes of one rank: no shard group, an all-reduce of the whole gradient
   * (2 (R-1)/R of it) across nodes. */
  job.ranks_per_node = 1;
  cfg.strategy = FSDP_HYBRID_SHARD;
  cfg.sharding_factor = 1;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(t.all_gather_s == 0 && t.reduce_scatter_s == 0);
  CHECK(close_to(t.all_reduce_s, 1e-5 + 2 * bytes / 2 / 1e8));
  CHECK(close_to(t.step_s, t.compute_s + t.all_reduce_s));
  /* CPU offload: the shard's copy to the device before each gather and the gradient shard's copy
   * back after the reduce, on the communication stream. */
  cfg.strategy = FSDP_FULL_SHARD;
  cfg.sharding_factor = 0;
  cfg.memory_space = FSDP_MEMORY_CUDA;
  cfg.transport = FSDP_TRANSPORT_NCCL;
  cfg.cpu_offload = 1;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  const double copy = bytes / 2 / 5e8;
  CHECK(close_to(t.offload_copy_s, 3 * copy));
  CHECK(close_to(t.step_s, t.compute_s + 3 * ring + 3 * copy));
  /* NCCL over 2 nodes of 2 ranks: each node's 2 NICs carry the ring's crossings (one channel
   * each), 3/4 of the buffer at 2 x 1e8 B/s; the host's MPI ring crosses at one rank's. */
  cfg.cpu_offload = 0;
  job.world_size = 4;
  job.ranks_per_node = 2;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(close_to(t.all_gather_s, 2 * (1e-5 + bytes * 3 / 4 / 2e8)));
  cfg.memory_space = FSDP_MEMORY_HOST;
  cfg.transport = FSDP_TRANSPORT_MPI;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(close_to(t.all_gather_s, 2 * (1e-5 + bytes * 3 / 4 / 1e8)));
  CHECK_OK(fsdp_plan_destroy(&plan));
}

/* Two equal units, each computation longer than two collectives, 2 ranks on 2 nodes; by the
 * rules of doc/planning-model.md (one computation stream, one communication stream):
 *   without prefetch: 2g + 2cf (forward) + g + cb + r + g + cb + r = 4g + 2r + 2cf + 2cb
 *     (backward's second gather waits behind the first unit's reduce-scatter);
 *   with prefetch:    g + 2cf (the second gather hides behind the first unit) + g + 2cb + r
 *     (backward's first gather, then the reduce of the last unit). */
static void two_units(void) {
  const int64_t n = 1000000;
  fsdp_param_desc_t d = {"w", 1, &n, FSDP_FLOAT32, 1};
  fsdp_plan_t plan = NULL;
  CHECK_OK(fsdp_plan_create(&plan));
  CHECK_OK(fsdp_plan_add_unit(plan, "a", 1, &d, NULL));
  CHECK_OK(fsdp_plan_add_unit(plan, "b", 1, &d, NULL));
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  fsdp_plan_job_t job = FSDP_PLAN_JOB_INIT;
  job.config = &cfg;
  job.world_size = 2;
  job.ranks_per_node = 1;
  job.batch_size = 32;
  job.sequence_length = 1000;
  const fsdp_plan_machine_t mach = round_machine();
  const double T = 32000, rate = 0.5e12, g = 1e-5 + 4e6 / 2 / 1e8, r = g;
  const double cf = 2 * 1e6 * T / rate, cb = 4 * 1e6 * T / rate;
  CHECK(cf > 2 * g && cb > 2 * g);
  fsdp_plan_time_t t = {sizeof t};
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(close_to(t.step_s, 4 * g + 2 * r + 2 * cf + 2 * cb));
  CHECK(close_to(t.exposed_comm_s, 4 * g + 2 * r));
  job.prefetch_forward = job.prefetch_backward = 1;
  CHECK_OK(fsdp_plan_time(plan, &job, &mach, 0, &t));
  CHECK(close_to(t.step_s, 2 * g + r + 2 * cf + 2 * cb));
  CHECK(close_to(t.exposed_comm_s, 2 * g + r));
  CHECK(close_to(t.all_gather_s, 4 * g) && close_to(t.reduce_scatter_s, 2 * r));
  CHECK_OK(fsdp_plan_destroy(&plan));
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_plan_estimates");
  if (argc < 2) {
    fprintf(stderr, "usage: test_plan_estimates gpt2.json\n");
    return 2;
  }
  gpt2(argv[1]);
  one_unit();
  two_units();
  return th_finish();
}
