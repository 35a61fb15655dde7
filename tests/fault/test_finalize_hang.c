/* fsdp_finalize after a peer stopped taking part: never a silent hang (issue 33 item 9).
 *
 * Rank 0 starts an asynchronous gradient reduction that rank 1 never joins (it sleeps instead, as
 * a dead or stuck peer would), then calls fsdp_finalize, whose teardown waits for the reduction
 * inside MPI. The watchdog (timeout_s = 2, on_timeout = error) must still be watching that wait:
 * it reports fsdp_finalize as overdue, interrupts the context, and, the wait being inside MPI,
 * ends the job after the grace period. Run by tests/fault/finalize_hang.sh, which requires the
 * report and the job's end well before its own limit. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#include "fsdp.h"

int main(int argc, char** argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fsdp_config_t cfg = FSDP_CONFIG_INIT;
  cfg.transport = FSDP_TRANSPORT_MPI;
  cfg.timeout_s = 2.0;
  cfg.on_timeout = FSDP_ON_TIMEOUT_ERROR;
  fsdp_context_t ctx = NULL;
  if (fsdp_init(MPI_COMM_WORLD, &cfg, &ctx) != FSDP_SUCCESS) {
    fprintf(stderr, "fsdp_init: %s\n", fsdp_last_error());
    return 1;
  }
  static const int64_t shape[1] = {4096};
  fsdp_param_desc_t d = {"w", 1, shape, FSDP_FLOAT32, 1};
  fsdp_unit_t u = NULL;
  if (fsdp_unit_create(ctx, 1, &d, NULL, &u) != FSDP_SUCCESS) return 1;
  void* g = NULL;
  fsdp_grad_data(u, 0, &g);
  if (rank == 0) {
    fsdp_request_t req = NULL;
    fsdp_reduce_grads_async(u, &req); /* rank 1 never joins: the collective cannot complete */
    fprintf(stderr, "rank 0: calling fsdp_finalize with a reduction its peer never joined\n");
    fsdp_finalize(&ctx); /* must not hang silently: the watchdog ends the job */
    fprintf(stderr, "rank 0: fsdp_finalize returned (unexpected)\n");
  } else {
    sleep(120); /* a peer that stopped taking part */
  }
  MPI_Finalize();
  return 0;
}
