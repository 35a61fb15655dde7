/* NCCL failures end in a status on every surviving rank, never a hang (issue 33 items 5, 9, 10).
 * Two ranks, one GPU each, NCCL forced; skipped (exit 77) with fewer GPUs than ranks. In each mode
 * rank 0 queues a gradient reduction rank 1 never joins, then waits for it on the CPU inside
 * fsdp_clip_grad_norm (its norm is read back after the reduction on the library's stream):
 *   abort:     another thread of rank 0 calls fsdp_abort after 1 s: the wait returns
 *              FSDP_ERR_ABORTED within 20 s; later calls are refused; fsdp_finalize returns.
 *   timeout:   timeout_s = 2, on_timeout = error: the watchdog interrupts the wait, which returns
 *              FSDP_ERR_TIMEOUT (the watchdog's cause, not ABORTED) within 20 s.
 *   dead_peer: rank 1 kills itself (SIGKILL) while rank 0 waits (timeout_s = 5): rank 0 gets
 *              FSDP_ERR_NCCL or FSDP_ERR_TIMEOUT within 30 s and fsdp_finalize returns. Run under
 *              Hydra's -disable-auto-cleanup so the survivor is not killed with its peer.
 * Rank 0 prints "PASS: <mode>" once everything held; rank 1 (abort, timeout) aborts its own
 * context before finalizing, as an application's error path would. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_reason.h"
#include "harness.h"

static fsdp_context_t ctx_;

static void* abort_later(void* arg) {
  (void)arg;
  sleep(1);
  fsdp_abort(ctx_);
  return NULL;
}

int main(int argc, char** argv) {
  th_init(&argc, &argv, "test_gpu_faults");
  const char* mode = argc > 1 ? argv[1] : "abort";
  int count = 0;
  gpu_print_runtime_error();
  if (th_skip_without_gpu(1, &count)) return 77;
  if (th_size() != 2) {
    if (th_rank() == 0) printf("skipped: needs exactly 2 ranks\n");
    MPI_Finalize();
    return 77;
  }
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.memory_space = FSDP_MEMORY_CUDA;
  cfg.transport = FSDP_TRANSPORT_NCCL;
  cfg.on_timeout = FSDP_ON_TIMEOUT_ERROR;
  if (!strcmp(mode, "timeout")) cfg.timeout_s = 2.0;
  if (!strcmp(mode, "dead_peer")) cfg.timeout_s = 5.0;
  CHECK_OK(fsdp_init(MPI_COMM_WORLD, &cfg, &ctx_));
  static const int64_t shape[1] = {1 << 20};
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  CHECK_OK(fsdp_unit_create(ctx_, 1, &d, NULL, &u));
  void* g = NULL;
  CHECK_OK(fsdp_grad_data(u, 0, &g)); /* zeros: nothing to write for this test */
  MPI_Barrier(MPI_COMM_WORLD);        /* both set up: from here rank 1 stops taking part */
  if (th_rank() == 1) {
    if (!strcmp(mode, "dead_peer")) {
      sleep(1);
      raise(SIGKILL);
    }
    sleep(!strcmp(mode, "timeout") ? 6 : 3);
    CHECK_OK(fsdp_abort(ctx_)); /* its own error path: no collective with the aborted rank 0 */
    CHECK_OK(fsdp_finalize(&ctx_));
    return th_finish();
  }
  pthread_t t;
  if (!strcmp(mode, "abort")) pthread_create(&t, NULL, abort_later, NULL);
  const double t0 = MPI_Wtime();
  fsdp_status_t st = fsdp_reduce_grads(u); /* queued on the library's stream: does not block */
  double norm = 0.0;
  if (st == FSDP_SUCCESS) st = fsdp_clip_grad_norm(ctx_, 1.0, 2.0, &norm); /* the CPU waits */
  const double took = MPI_Wtime() - t0;
  char msg[320];
  snprintf(msg, sizeof msg, "%s: the wait returned %d after %.1f s: %s", mode, (int)st, took,
           fsdp_last_error());
  printf("%s\n", msg);
  if (!strcmp(mode, "abort")) {
    pthread_join(t, NULL);
    CHECK_MSG(st == FSDP_ERR_ABORTED && took < 20.0, msg);
    CHECK_FAILS(fsdp_unshard(u), FSDP_ERR_ABORTED, "abort");
  } else if (!strcmp(mode, "timeout")) {
    CHECK_MSG(st == FSDP_ERR_TIMEOUT && took < 20.0, msg);
  } else {
    CHECK_MSG((st == FSDP_ERR_NCCL || st == FSDP_ERR_TIMEOUT) && took < 30.0, msg);
  }
  CHECK_OK(fsdp_finalize(&ctx_));
  if (th_local_failures() == 0) printf("PASS: %s\n", mode);
  fflush(stdout);
  if (!strcmp(mode, "dead_peer"))
    _exit(th_local_failures() ? 1 : 0); /* MPI_Finalize needs the dead */
  return th_finish();
}
