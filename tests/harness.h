/* A small harness for multi-rank C tests: checks count per rank, failures print rank, file, line
 * and libfsdp's last error, and th_finish() combines every rank's count into the exit status. */
#ifndef FSDP_TEST_HARNESS_H
#define FSDP_TEST_HARNESS_H

#include <mpi.h>
#include <stdint.h>

#include "fsdp.h"

void th_init(int* argc, char*** argv, const char* name);
int th_finish(void);          /* calls MPI_Finalize; returns the process exit status */
long th_local_failures(void); /* this rank's failed checks so far (no communication) */
int th_rank(void);
int th_size(void);
void th_record(int ok, const char* file, int line, const char* expr, const char* detail);

#define CHECK(cond) th_record((cond) != 0, __FILE__, __LINE__, #cond, "")
#define CHECK_MSG(cond, msg) th_record((cond) != 0, __FILE__, __LINE__, #cond, (msg))
/* The call must succeed; a failure prints its status and message (read after the call: C leaves
 * the order of a call's arguments unspecified). */
#define CHECK_OK(call) th_check_ok((call), __FILE__, __LINE__, #call)
void th_check_ok(fsdp_status_t got, const char* file, int line, const char* expr);
/* The call must fail with `status`, and its message must name `needle` (call and argument). */
#define CHECK_FAILS(call, status, needle) \
  th_expect_failure((call), (status), (needle), __FILE__, __LINE__, #call)
void th_expect_failure(fsdp_status_t got, fsdp_status_t want, const char* needle, const char* file,
                       int line, const char* expr);

/* Runs `run` on a full-sharding context, then, at 4 ranks, on a hybrid one (2 shard groups of 2),
 * each context initialized and finalized around it. */
void th_run_full_and_hybrid(void (*run)(fsdp_context_t ctx));

/* Ranks per node as the library sees them: this machine's, or FSDP_RANKS_PER_NODE (which cuts
 * nodes into smaller ones for testing) when smaller. Collective. */
int th_ranks_per_node(void);
/* GPU tests: nonzero (after printing why and finalizing MPI: return 77 next) when a rank sees no
 * CUDA device, or when `one_per_rank` and some rank has fewer GPUs than there are ranks. Writes
 * this rank's device count to *count. */
int th_skip_without_gpu(int one_per_rank, int* count);
/* How many ranks share one unsharded buffer and are each charged 1/n of it in fsdp_memory_stats:
 * with the shared-memory transport, the shard group's ranks on this node; else 1. Found here from
 * MPI and the environment, independently of the library's own team. Collective. */
size_t th_unsharded_sharers(fsdp_context_t ctx);
/* Whether the context's unsharded buffers come from the buffer pool (not node-shared slots). */
int th_unsharded_pooled(fsdp_context_t ctx);
/* Whether the context's units whose param_dtype is their dtype, and whose parameters are all
 * trainable or all frozen, keep their shards inside the node's unsharded copy and so take no
 * unsharded memory: FSDP_TRANSPORT_SHM_ZERO_COPY with the shard group on one node. Found from the
 * placement, F and the node size, not from the unit (fsdp_unit_zero_copy). Collective. */
int th_zero_copy(fsdp_context_t ctx);

/* fsdp_memory_stats' allocation_calls: allocator and shared-window calls the context made. */
uint64_t th_allocation_calls(fsdp_context_t ctx);

/* The flat layout fsdp.h promises, computed here from the parameters' element counts only (units
 * whose parameters are all trainable): parameter i starts at th_param_offset(u, i), each offset the
 * previous parameter's end rounded up to a multiple of 8 elements. th_flat_param tells which
 * parameter holds flat element k (-1: padding) and its index inside it. */
size_t th_param_offset(fsdp_unit_t u, int i);
int th_flat_param(fsdp_unit_t u, size_t k, size_t* elem);

/* Deterministic pseudo-random numbers in [-1, 1), independent of libfsdp. */
double th_uniform(uint64_t* state);

/* A unit of n 1-D float32 parameters (names[i], sizes[i] elements; trainable NULL: all
 * trainable, else trainable[i]), element e of parameter p starting as init(p, e). Collective
 * (fsdp_unit_create); NULL after a failed (and recorded) creation. */
fsdp_unit_t th_unit_1d(fsdp_context_t ctx, int n, const char* const* names, const int64_t* sizes,
                       const int* trainable, float (*init)(int p, size_t e));

#endif
