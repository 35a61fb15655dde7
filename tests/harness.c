#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* test_name = "test";
static long checks_passed, checks_failed;
static int world_rank, world_size;

void th_init(int* argc, char*** argv, const char* name) {
  /* MPI_THREAD_MULTIPLE gives contexts their progress thread; FSDP_TEST_THREAD_SINGLE=1 tests the
   * path without one. */
  const char* single = getenv("FSDP_TEST_THREAD_SINGLE");
  int provided = 0;
  MPI_Init_thread(argc, argv,
                  single && !strcmp(single, "1") ? MPI_THREAD_SINGLE : MPI_THREAD_MULTIPLE,
                  &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_name = name;
}

int th_rank(void) {
  return world_rank;
}
int th_size(void) {
  return world_size;
}

void th_record(int ok, const char* file, int line, const char* expr, const char* detail) {
  if (ok) {
    ++checks_passed;
    return;
  }
  ++checks_failed;
  fprintf(stderr, "[rank %d] FAILED %s:%d: %s%s%s\n", world_rank, file, line, expr,
          detail && *detail ? " -- " : "", detail ? detail : "");
  fflush(stderr);
}

void th_check_ok(fsdp_status_t got, const char* file, int line, const char* expr) {
  char detail[1200];
  if (got != FSDP_SUCCESS)
    snprintf(detail, sizeof detail, "status %d: %s", (int)got, fsdp_last_error());
  th_record(got == FSDP_SUCCESS, file, line, expr, got == FSDP_SUCCESS ? "" : detail);
}

void th_expect_failure(fsdp_status_t got, fsdp_status_t want, const char* needle, const char* file,
                       int line, const char* expr) {
  char detail[1024];
  const char* msg = fsdp_last_error();
  if (got != want) {
    snprintf(detail, sizeof detail, "status %d (%s), expected %d (%s); message: %s", (int)got,
             fsdp_status_string(got), (int)want, fsdp_status_string(want), msg);
    th_record(0, file, line, expr, detail);
  } else if (needle && !strstr(msg, needle)) {
    snprintf(detail, sizeof detail, "message \"%s\" does not name \"%s\"", msg, needle);
    th_record(0, file, line, expr, detail);
  } else {
    th_record(1, file, line, expr, "");
  }
}

size_t th_param_offset(fsdp_unit_t u, int i) {
  size_t end = 0, offset = 0;
  for (int j = 0; j <= i; ++j) {
    size_t n = 0;
    if (fsdp_param_numel(u, j, &n) != FSDP_SUCCESS) abort();
    offset = (end + 7) / 8 * 8;
    end = offset + n;
  }
  return offset;
}

int th_flat_param(fsdp_unit_t u, size_t k, size_t* elem) {
  int nparams = 0;
  if (fsdp_unit_info(u, &nparams, NULL) != FSDP_SUCCESS) abort();
  for (int i = 0; i < nparams; ++i) {
    size_t n = 0;
    if (fsdp_param_numel(u, i, &n) != FSDP_SUCCESS) abort();
    const size_t offset = th_param_offset(u, i);
    if (k >= offset && k < offset + n) {
      if (elem) *elem = k - offset;
      return i;
    }
  }
  return -1;
}

fsdp_unit_t th_unit_1d(fsdp_context_t ctx, int n, const char* const* names, const int64_t* sizes,
                       const int* trainable, float (*init)(int p, size_t e)) {
  fsdp_param_desc_t* d = calloc((size_t)n, sizeof *d);
  float** values = calloc((size_t)n, sizeof *values);
  for (int i = 0; i < n; ++i) {
    d[i] = (fsdp_param_desc_t){names[i], 1, &sizes[i], FSDP_FLOAT32, trainable ? trainable[i] : 1};
    values[i] = malloc((size_t)sizes[i] * sizeof(float));
    for (int64_t e = 0; e < sizes[i]; ++e) values[i][e] = init(i, (size_t)e);
  }
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx, n, d, (const void* const*)values, &u));
  for (int i = 0; i < n; ++i) free(values[i]);
  free(values);
  free(d);
  return u;
}

double th_uniform(uint64_t* state) {
  /* splitmix64 */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

long th_local_failures(void) {
  return checks_failed;
}

int th_finish(void) {
  long local[2] = {checks_passed, checks_failed}, total[2] = {0, 0};
  MPI_Allreduce(local, total, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    printf("%s on %d rank(s): %ld checks ok, %ld checks failed\n", test_name, world_size, total[0],
           total[1]);
  MPI_Finalize();
  return total[1] == 0 && total[0] > 0 ? 0 : 1;
}

void th_run_full_and_hybrid(void (*run)(fsdp_context_t ctx)) {
  fsdp_context_t ctx = NULL;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, NULL, &ctx));
  run(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
  if (world_size != 4) return;
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.strategy = FSDP_HYBRID_SHARD;
  cfg.sharding_factor = 2;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx));
  run(ctx);
  CHECK_OK(fsdp_finalize(&ctx));
}

int th_skip_without_gpu(int one_per_rank, int* count) {
  *count = 0;
  CHECK_OK(fsdp_cuda_device_count(count));
  int few[2] = {*count == 0, *count < th_size()}, any[2] = {0, 0};
  MPI_Allreduce(few, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!any[0] && !(one_per_rank && any[1])) return 0;
  if (th_rank() == 0) {
    if (any[0])
      printf("skipped: no CUDA device\n");
    else
      printf("skipped: %d ranks, %d GPU(s): NCCL needs one per rank\n", th_size(), *count);
  }
  MPI_Finalize();
  return 1;
}

int th_ranks_per_node(void) {
  MPI_Comm node = MPI_COMM_NULL;
  int on_node = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &on_node);
  MPI_Comm_free(&node);
  const char* k = getenv("FSDP_RANKS_PER_NODE");
  if (k && atoi(k) > 0 && atoi(k) < on_node) on_node = atoi(k);
  return on_node;
}

size_t th_unsharded_sharers(fsdp_context_t ctx) {
  fsdp_transport_t t = FSDP_TRANSPORT_AUTO;
  int F = 1;
  CHECK_OK(fsdp_context_placement(ctx, NULL, NULL, NULL, &t));
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));
  const int on_node = th_ranks_per_node();
  if (t != FSDP_TRANSPORT_SHM && t != FSDP_TRANSPORT_SHM_ZERO_COPY) return 1;
  /* Shard groups are F consecutive ranks in node order, so F and the node size nest. */
  return (size_t)(F < on_node ? F : on_node);
}

int th_unsharded_pooled(fsdp_context_t ctx) {
  fsdp_transport_t t = FSDP_TRANSPORT_AUTO;
  CHECK_OK(fsdp_context_placement(ctx, NULL, NULL, NULL, &t));
  return t != FSDP_TRANSPORT_SHM && t != FSDP_TRANSPORT_SHM_ZERO_COPY;
}

uint64_t th_allocation_calls(fsdp_context_t ctx) {
  fsdp_memory_stats_t m;
  memset(&m, 0, sizeof m);
  m.size = sizeof m;
  CHECK_OK(fsdp_memory_stats(ctx, &m));
  return m.allocation_calls;
}

int th_zero_copy(fsdp_context_t ctx) {
  fsdp_transport_t t = FSDP_TRANSPORT_AUTO;
  int F = 1;
  CHECK_OK(fsdp_context_placement(ctx, NULL, NULL, NULL, &t));
  CHECK_OK(fsdp_context_config(ctx, &F, NULL, NULL));
  return t == FSDP_TRANSPORT_SHM_ZERO_COPY && F <= th_ranks_per_node();
}
