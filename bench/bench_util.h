/* What the benchmarks share: failing loudly, and medians. */
#ifndef FSDP_BENCH_UTIL_H
#define FSDP_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "fsdp.h"

#define TRY(call)                                            \
  do {                                                       \
    fsdp_status_t s_ = (call);                               \
    if (s_ != FSDP_SUCCESS) {                                \
      fprintf(stderr, "%s: %s\n", #call, fsdp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                          \
    }                                                        \
  } while (0)

static int bench_cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Sorts v. */
static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
